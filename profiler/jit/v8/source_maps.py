"""Source maps (ECMA-426, version 3): what a script's generated positions
were in the sources it was made from, and the original names of its
functions. A map is a file the target controls: its JSON is checked field
by field, its `mappings` never decoded whole (native/source_map.c answers
a batch of positions in one pass), and anything malformed is a
SourceMapError for the whole map, never a half-read one.

Finding and reading a script's map (its `//# sourceMappingURL=`, a file
beside it or a data: URL) is the caller's; this module takes its text."""

from __future__ import annotations

import bisect
import dataclasses
import json
import re
from dataclasses import dataclass

from profiler.native import library

MAX_SOURCES = 1 << 20
MAX_NAMES = 1 << 21
MAX_SECTIONS = 1 << 12
# Arrays and objects a map is made of (its lists, its sections' few each):
# 120 MB of `[[],[],...]` would be 40 M lists, gigabytes once parsed.
MAX_CONTAINERS = 16 * MAX_SECTIONS + 1024
_STRING_OR_CONTAINER = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[{]', re.S)


class SourceMapError(ValueError):
    pass


@dataclass(frozen=True)
class Original:
    """A generated position's origin: 1-based line and column, and the name
    the map gives the token there (None: none); segment_column: the
    generated column (1-based) where the map's segment for it begins."""

    source: str
    line: int
    column: int
    name: str | None
    segment_column: int = 0


@dataclass(frozen=True)
class _Section:
    """A section of an index source map: where it begins and its map."""

    line: int  # where it begins in the generated script, 0-based
    column: int
    source_map: SourceMap


@dataclass(frozen=True)
class SourceMap:
    """A parsed source map, its mappings kept encoded."""

    sources: tuple[str, ...]
    names: tuple[str, ...]
    mappings: bytes
    sections: tuple[_Section, ...] = ()  # an index map: these, not the fields above

    def size_bytes(self) -> int:
        """About what it holds in memory: its mappings, names and sources."""
        own = len(self.mappings) + sum(len(name) + 56 for name in self.names) + sum(len(source) + 56 for source in self.sources)
        return own + sum(section.source_map.size_bytes() for section in self.sections)

    def has_names(self) -> bool:
        return bool(self.names) or any(section.source_map.has_names() for section in self.sections)

    def originals(self, positions: list[tuple[int, int]]) -> list[Original | None]:
        """The origin of each generated (line, column), 1-based, in any order."""
        order = sorted(range(len(positions)), key=lambda index: positions[index])
        found: list[Original | None] = [None] * len(positions)
        for index, original in zip(order, self._sorted_originals([_zero_based(positions[i]) for i in order]), strict=True):
            found[index] = original
        return found

    def _sorted_originals(self, positions: list[tuple[int, int]]) -> list[Original | None]:
        if self.sections:
            return self._in_sections(positions)
        try:
            mapped = library.source_map_lookup(self.mappings, len(self.sources), len(self.names), positions)
        except library.MalformedMappings as error:
            raise SourceMapError("its mappings are malformed") from error
        return [
            Original(
                self.sources[where.source],
                where.line + 1,
                where.column + 1,
                self.names[where.name] if where.name >= 0 else None,
                where.generated_column + 1,
            )
            if where is not None
            else None
            for where in mapped
        ]

    def _in_sections(self, positions: list[tuple[int, int]]) -> list[Original | None]:
        """Each position goes to the last section that begins at or before it,
        in that section's coordinates (its first line's columns shifted)."""
        starts = [(section.line, section.column) for section in self.sections]
        by_section: dict[int, list[int]] = {}
        for index, position in enumerate(positions):
            at = bisect.bisect_right(starts, position) - 1
            if at >= 0:
                by_section.setdefault(at, []).append(index)
        found: list[Original | None] = [None] * len(positions)
        for section_index, indices in by_section.items():
            section = self.sections[section_index]
            local = [
                (line - section.line, column - section.column if line == section.line else column)
                for line, column in (positions[index] for index in indices)
            ]
            for index, original in zip(indices, section.source_map._sorted_originals(local), strict=True):
                if original is not None and positions[index][0] == section.line:
                    original = dataclasses.replace(original, segment_column=original.segment_column + section.column)
                found[index] = original
        return found


def _zero_based(position: tuple[int, int]) -> tuple[int, int]:
    line, column = position
    return max(line - 1, 0), max(column - 1, 0)


def parse_source_map(text: bytes | str, source_base: str = "") -> SourceMap:
    """A map from its JSON text; sources joined to source_base (the map's
    own directory, or the script's URL) unless absolute."""
    raw = text.encode() if isinstance(text, str) else text
    # Strings cost ~60 bytes each once parsed: a map of a million tiny names
    # is refused before it is, not after.
    if raw.count(b'"') - raw.count(b'\\"') > 2 * (MAX_NAMES + 2 * MAX_SOURCES + 64 * MAX_SECTIONS):
        raise SourceMapError("it has too many strings")
    if raw.count(b"[") + raw.count(b"{") > MAX_CONTAINERS and _containers(raw) > MAX_CONTAINERS:
        raise SourceMapError("it has too many arrays and objects")
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as error:
        raise SourceMapError("it is not JSON") from error
    return _parse(document, source_base, nested=False)


def _containers(raw: bytes) -> int:
    """The arrays and objects outside strings (code in sourcesContent has
    brackets of its own), counted up to just past MAX_CONTAINERS."""
    count = 0
    for found in _STRING_OR_CONTAINER.finditer(raw):
        if found.end() - found.start() == 1:
            count += 1
            if count > MAX_CONTAINERS:
                break
    return count


def _parse(document: object, source_base: str, nested: bool) -> SourceMap:
    if not isinstance(document, dict) or document.get("version") != 3:
        raise SourceMapError("it is not a version 3 source map")
    if "sections" in document:
        if nested:
            raise SourceMapError("a section is itself an index map")
        return _parse_index(document, source_base)
    mappings, sources, names = document.get("mappings"), document.get("sources"), document.get("names", [])
    root = document.get("sourceRoot") or ""
    if not isinstance(mappings, str) or not isinstance(sources, list) or not isinstance(names, list) or not isinstance(root, str):
        raise SourceMapError("its mappings, sources or names are missing or not of their types")
    if len(sources) > MAX_SOURCES or len(names) > MAX_NAMES:
        raise SourceMapError("it has too many sources or names")
    if not all(source is None or isinstance(source, str) for source in sources) or not all(
        isinstance(name, str) for name in names
    ):
        raise SourceMapError("a source or a name is not a string")
    try:
        encoded = mappings.encode("ascii")
    except UnicodeEncodeError as error:
        raise SourceMapError("its mappings are not base64") from error
    return SourceMap(tuple(_source_path(source or "", root, source_base) for source in sources), tuple(names), encoded)


def _parse_index(document: dict, source_base: str) -> SourceMap:
    sections = document["sections"]
    if not isinstance(sections, list) or len(sections) > MAX_SECTIONS:
        raise SourceMapError("its sections are not a list, or too many")
    parsed: list[_Section] = []
    for section in sections:
        offset = section.get("offset") if isinstance(section, dict) else None
        line = offset.get("line") if isinstance(offset, dict) else None
        column = offset.get("column") if isinstance(offset, dict) else None
        if not isinstance(line, int) or not isinstance(column, int) or line < 0 or column < 0 or "map" not in section:
            raise SourceMapError("a section has no offset or no map (a section by URL is not read)")
        if parsed and (line, column) < (parsed[-1].line, parsed[-1].column):
            raise SourceMapError("its sections are out of order")
        parsed.append(_Section(line, column, _parse(section["map"], source_base, nested=True)))
    return SourceMap((), (), b"", tuple(parsed))


def _source_path(source: str, root: str, base: str) -> str:
    """A source as a user finds it: sourceRoot and the map's place applied,
    `..` resolved lexically (it names a file to show, never one jitprof opens)."""
    if root and not _absolute(source):
        source = root.rstrip("/") + "/" + source
    if base and not _absolute(source):
        source = base.rstrip("/") + "/" + source
    return _normalized(source)


def _absolute(path: str) -> bool:
    return path.startswith("/") or "://" in path[:16] or path.startswith("webpack:")


def _normalized(path: str) -> str:
    scheme, separator, rest = path.partition("://")
    if not separator:
        scheme, rest = "", path
    leading = "/" if rest.startswith("/") else ""
    parts: list[str] = []
    for part in rest.split("/"):
        if part in ("", "."):
            continue
        if part == ".." and parts and parts[-1] != "..":
            parts.pop()
        elif part != ".." or not leading:
            parts.append(part)
    joined = leading + "/".join(parts)
    return f"{scheme}://{joined}" if separator else joined
