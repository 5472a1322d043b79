"""Parse /proc/PID/maps into records."""

from __future__ import annotations

import re
from dataclasses import dataclass

# Pseudo-files whose code is not backed by an ELF file on disk.
SPECIAL_NAMES = ("[vdso]", "[vsyscall]", "[stack]", "[heap]", "[vvar]", "[uprobes]")
# Shared anonymous memory and memfd double-mapping (used by some JITs) have a
# path and an inode, but no file worth reading.
ANONYMOUS_PATH_PREFIXES = ("/dev/zero", "/memfd:", "/SYSV")
# A jitdump its writer maps executable for profilers to find (perf's
# jit-PID.dump; JavaScriptCore's jit-TID-PID.dump): a marker, never code.
JITDUMP_MARKER = re.compile(r"/jit-\d+(?:-\d+)?\.dump$")


@dataclass(frozen=True)
class MapEntry:
    """One line of /proc/PID/maps."""

    start: int
    end: int
    readable: bool
    writable: bool
    executable: bool
    offset: int
    device: str
    inode: int
    path: str  # "" for anonymous memory
    deleted: bool = False

    @property
    def is_file_backed(self) -> bool:
        return self.inode != 0 and self.path.startswith("/") and not self.path.startswith(ANONYMOUS_PATH_PREFIXES)

    @property
    def is_anonymous_exec(self) -> bool:
        """Executable memory with no file behind it: JIT code, most likely."""
        return self.executable and not self.is_file_backed and self.path not in SPECIAL_NAMES

    @property
    def is_jitdump_marker(self) -> bool:
        return JITDUMP_MARKER.search(self.path) is not None

    def contains(self, address: int) -> bool:
        return self.start <= address < self.end


def parse_maps_line(line: str) -> MapEntry | None:
    """One line of /proc/PID/maps, or None if it is not in the kernel's format."""
    fields = line.rstrip("\n").split(maxsplit=5)
    if len(fields) < 5:
        return None
    address_range, perms, offset, device, inode = fields[:5]
    path = fields[5].strip() if len(fields) == 6 else ""
    try:
        start_text, end_text = address_range.split("-")
        start, end = int(start_text, 16), int(end_text, 16)
        offset_value = int(offset, 16)
        inode_value = int(inode)
    except ValueError:
        return None
    if len(perms) < 4 or end <= start:
        return None
    deleted = path.endswith(" (deleted)")
    if deleted:
        path = path[: -len(" (deleted)")]
    return MapEntry(
        start=start,
        end=end,
        readable=perms[0] == "r",
        writable=perms[1] == "w",
        executable=perms[2] == "x",
        offset=offset_value,
        device=device,
        inode=inode_value,
        path=path,
        deleted=deleted,
    )


def parse_maps(text: str, executable_only: bool = False) -> list[MapEntry]:
    entries = []
    for line in text.splitlines():
        if executable_only:
            # Most of a runtime's hundreds of mappings are data: they are
            # passed over on their permissions ("r-xp"), not parsed.
            space = line.find(" ")
            if line[space + 3 : space + 4] != "x":
                continue
        entry = parse_maps_line(line)
        if entry is not None and (entry.executable or not executable_only):
            entries.append(entry)
    return entries


def read_maps(pid: int, executable_only: bool = False, naming: tuple[str, ...] = ()) -> list[MapEntry]:
    """The mappings of a live process (or only its executable ones); [] once it has gone,
    or (with naming) when no mapping's path holds any of those names: a JVM's
    thousands of lines are then not parsed."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
            if naming and not any(name in text for name in naming):
                return []
            return parse_maps(text, executable_only)
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return []
    except OSError:
        return []
