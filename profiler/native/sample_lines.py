"""The sample lines of a saved profile split in C (native/sample_lines.c):
their numbers as columns and their texts as indexes among the distinct
texts seen, each text handed over once, when it is new."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from profiler.native.library import load

COMM, STACK, WALK_END = 0, 1, 2  # the kinds of a line's texts


@dataclass
class SplitLines:
    """One block's lines; a field's list holds a value only where parsed is true."""

    parsed: list[int]
    time_ns: list[int]
    pid: list[int]
    tid: list[int]
    waited_ns: list[int]
    comm: list[int]
    stack: list[int]
    walk_end: list[int]
    news: list[tuple[int, int, int, bytes]]  # (kind, index, line in the block, text) for each text seen first here


class SampleLineSplitter:
    """One per file read: it remembers the texts seen (they repeat across blocks)."""

    def __init__(self) -> None:
        self._ffi, self._lib = load()
        reader = self._ffi.new("struct jp_sample_reader **")
        if self._lib.jp_sample_reader_new(reader) != self._lib.JP_OK:
            raise MemoryError("cannot start the sample-line reader")
        self._reader: Any = self._ffi.gc(reader[0], self._lib.jp_sample_reader_free)

    def split(self, block: bytes, line_count: int, number_limit: int) -> SplitLines:
        """line_count lines, joined by newlines in block, each number below number_limit."""
        ffi, lib = self._ffi, self._lib
        arrays = {
            name: ffi.new(f"{kind}[]", max(line_count, 1))
            for name, kind in (
                ("time_ns", "uint64_t"),
                ("pid", "uint64_t"),
                ("tid", "uint64_t"),
                ("waited_ns", "uint64_t"),
                ("comm", "uint32_t"),
                ("stack", "uint32_t"),
                ("walk_end", "uint32_t"),
                ("parsed", "uint8_t"),
            )
        }
        columns = ffi.new("struct jp_sample_columns *", arrays)
        news = ffi.new("struct jp_sample_text[]", 3 * max(line_count, 1))
        news_count = ffi.new("uint64_t *")
        result = lib.jp_sample_lines(self._reader, block, len(block), line_count, number_limit, columns, news, news_count)
        if result != lib.JP_OK:
            raise ValueError(f"the sample lines do not split as counted (error {result})")  # a bug: the caller joins them
        texts = [
            (entry.kind, entry.index, entry.line, block[entry.offset : entry.offset + entry.length])
            for entry in (news[index] for index in range(news_count[0]))
        ]
        return SplitLines(**{name: ffi.unpack(array, line_count) for name, array in arrays.items()}, news=texts)
