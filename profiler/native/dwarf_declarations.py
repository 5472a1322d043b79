"""The line an inlined function is declared on, from DWARF's
DW_AT_decl_line: speedscope (and DevTools-like readers) show one line per
function, where it begins, and blazesym's C API gives an inlined function's
name and call site but not its declaration.

Read with pyelftools in the locator's helper process (profiler/native/
locator_process.py), which already has the file and confines what parsing a
target's DWARF may cost. One compile unit at a time, the unit holding the
address (by .debug_aranges), and only when an inlined function needs it:
each of its functions' names with their declared lines, kept per unit. A
name declared on two different lines in the unit is not guessed (0); a unit
too large to read in UNIT_BUDGET_S gives none. Files without
.debug_aranges (clang's default) give none either.
"""

from __future__ import annotations

import importlib
import pkgutil
import time
from typing import Any, BinaryIO

MAX_UNIT_ENTRIES = 50_000  # DIEs read from one compile unit
# pyelftools reads some 50,000 entries a second: a unit is given up past this,
# well inside the helper's deadline for the whole request (a timeout there
# would cost the file all its names).
UNIT_BUDGET_S = 0.5
MAX_UNITS_KEPT = 64
MAX_SPECIFICATION_HOPS = 4
AMBIGUOUS = 0


def preload() -> None:
    """Import all of pyelftools now: the confined helper cannot import later
    (it imports some of its modules only when a file needs them)."""
    import elftools  # noqa: PLC0415

    for module in pkgutil.walk_packages(elftools.__path__, "elftools."):
        importlib.import_module(module.name)


def base_name(name: str) -> str:
    """The name DWARF gives a function (DW_AT_name) from the name blazesym
    shows: no parameters, no enclosing namespaces or classes
    ("shapes::Accumulator<long>::fold(int) const" is "fold")."""
    depth = 0
    end = len(name)
    for index, character in enumerate(name):
        if character == "<":
            depth += 1
        elif character == ">":
            depth = max(depth - 1, 0)
        elif character == "(" and depth == 0 and index > 0:
            if name.endswith("operator", 0, index) and name.startswith("()", index):
                continue  # operator()'s own parentheses: its parameters follow
            end = index
            break
    name = name[:end]
    depth = 0
    start = 0
    index = 0
    while index < len(name):
        character = name[index]
        if character == "<":
            depth += 1
        elif character == ">":
            depth = max(depth - 1, 0)
        elif depth == 0 and name.startswith("::", index):
            start = index + 2
            index += 1
        index += 1
    return name[start:]


class DeclaredLines:
    """The declared lines of functions in one ELF file's DWARF (the file
    itself or its separate debug file). Not thread-safe."""

    def __init__(self, handle: BinaryIO) -> None:
        self._handle = handle
        self._dwarf: Any = None
        self._aranges: Any = None
        self._opened = False
        self._units: dict[int, dict[str, int]] = {}

    def lines(self, address: int, names: list[str]) -> list[int]:
        """Each name's declared line in the compile unit that holds address
        (a file virtual address), 0 where unknown or ambiguous."""
        if not names:
            return []
        functions = self._unit_functions(address)
        return [functions.get(base_name(name), AMBIGUOUS) for name in names]

    def _unit_functions(self, address: int) -> dict[str, int]:
        if not self._open():
            return {}
        unit_offset = self._aranges.cu_offset_at_addr(address) if self._aranges is not None else None
        if unit_offset is None:
            return {}
        known = self._units.get(unit_offset)
        if known is None:
            if len(self._units) >= MAX_UNITS_KEPT:
                self._units.clear()
            known = self._read_unit(unit_offset)
            self._units[unit_offset] = known
        return known

    def _open(self) -> bool:
        if not self._opened:
            self._opened = True
            from elftools.elf.elffile import ELFFile  # noqa: PLC0415  (preloaded in the helper)

            self._handle.seek(0)
            elf = ELFFile(self._handle)
            if elf.has_dwarf_info():
                self._dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
                self._aranges = self._dwarf.get_aranges()
        return self._dwarf is not None

    def _read_unit(self, unit_offset: int) -> dict[str, int]:
        functions: dict[str, int] = {}
        unit = self._dwarf.get_CU_at(unit_offset)
        given_up_at = time.monotonic() + UNIT_BUDGET_S
        for count, entry in enumerate(unit.iter_DIEs()):
            if count >= MAX_UNIT_ENTRIES or (count % 1024 == 0 and time.monotonic() > given_up_at):
                return {}  # too large to read here: no lines rather than some
            if entry.tag != "DW_TAG_subprogram":
                continue
            name, line = _name_and_line(entry)
            if not name or line <= 0:
                continue
            if functions.get(name, line) != line:
                functions[name] = AMBIGUOUS
            else:
                functions[name] = line
        return functions


def _name_and_line(entry: Any) -> tuple[str, int]:
    """A function's name and declared line; a definition out of its class
    (DW_AT_specification) takes what it lacks from its declaration."""
    name, line = "", 0
    for _hop in range(MAX_SPECIFICATION_HOPS):
        attributes = entry.attributes
        if not name and "DW_AT_name" in attributes:
            value = attributes["DW_AT_name"].value
            name = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
        if not line and "DW_AT_decl_line" in attributes and isinstance(attributes["DW_AT_decl_line"].value, int):
            line = attributes["DW_AT_decl_line"].value
        if (name and line) or "DW_AT_specification" not in attributes:
            break
        entry = entry.get_DIE_from_attribute("DW_AT_specification")
    return name, line
