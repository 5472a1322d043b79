"""jitdump files (jit-PID.dump, perf's tools/perf/Documentation/jitdump-specification.txt).

A runtime appends one record per piece of code it makes, each with a
CLOCK_MONOTONIC timestamp, the clock the samples carry: so an address that
code reuses after a GC is resolved exactly, by time. The reader is
incremental (the writer may still be writing, possibly in large buffered
blocks) and the file is hostile: every size is checked against the record
and the file, a bad record stops the reading with a reason, and reading
always moves forwards.
"""

from __future__ import annotations

import bisect
import os
import struct
from dataclasses import dataclass, field
from enum import IntEnum

from profiler.jit.v8.names import parse_v8_name

MAGIC = 0x4A695444
MAGIC_SWAPPED = 0x4454694A
HEADER = struct.Struct("<IIIIIIQQ")  # magic, version, total_size, elf_mach, pad1, pid, timestamp, flags
RECORD_HEADER = struct.Struct("<IIQ")  # id, total_size (header included), timestamp
LOAD = struct.Struct("<IIQQQQ")  # pid, tid, vma, code_addr, code_size, code_index; then name\0 and the code
MOVE = struct.Struct("<IIQQQQQ")  # pid, tid, vma, old_code_addr, new_code_addr, code_size, code_index
DEBUG_INFO = struct.Struct("<QQ")  # code_addr, nr_entry
DEBUG_ENTRY = struct.Struct("<QII")  # addr, line, discrim; then file name\0
FLAG_ARCH_TIMESTAMP = 1  # timestamps from the TSC, not a clock the samples share

MAX_FILE_BYTES = 2 << 30  # reading stops here
MAX_RECORD_BYTES = 256 << 20  # no code blob or debug table is this big
MAX_NAME_BYTES = 16 << 10
MAX_DEBUG_ENTRIES = 1 << 20  # in one record
# A JVM's dump after a day of a busy service holds about 100 k code loads; a
# load costs about 300 bytes held, a source line 100. Past these the dump
# stops being read (with one line naming it): bounded memory and time
# whatever its writer does.
MAX_CODE_LOADS = 1_000_000
MAX_DEBUG_LINES = 4_000_000
MAX_OVERLAP_SCAN = 4096  # loads looked at per lookup on one page (the newest)
PAGE_SHIFT = 12
MAX_PAGE_ENTRIES = 4_000_000  # loads listed under pages, summed over the pages
READ_CHUNK = 8 << 20
# V8 writes DEBUG_INFO addresses 0x40 (an ELF header) past the code, for
# `perf inject`'s generated ELF files.
V8_DEBUG_ADDRESS_BIAS = 0x40


class RecordType(IntEnum):
    CODE_LOAD = 0
    CODE_MOVE = 1
    CODE_DEBUG_INFO = 2
    CODE_CLOSE = 3
    CODE_UNWINDING_INFO = 4


class JitdumpError(Exception):
    """Not a jitdump this reader can use; the message says why."""


@dataclass(frozen=True)
class JitdumpHeader:
    """A jitdump file's header, as the file says it."""

    version: int
    elf_machine: int
    pid: int
    timestamp: int
    flags: int


@dataclass(frozen=True)
class DebugLine:
    """One line entry of a debug-info record: where in the code a source line begins."""

    address: int  # where the line's code starts (bias removed)
    line: int
    column: int  # the spec's "discriminator"; V8 and others put the column there
    file: str


@dataclass(frozen=True)
class CodeLoad:
    """One piece of code, alive at [start, start + size) from `time_ns` on."""

    start: int
    size: int
    name: str
    index: int  # the writer's code index, unique per piece of code
    time_ns: int
    sequence: int  # order in the file: a later load over the same bytes wins
    lines: tuple[DebugLine, ...] = ()
    from_v8: bool = False  # a V8 name ("JS:*fib …"): its debug lines are biased and innermost-only

    @property
    def end(self) -> int:
        return self.start + self.size

    def line_at(self, address: int) -> DebugLine | None:
        if not self.lines:
            return None
        position = bisect.bisect_right(self.lines, address, key=lambda line: line.address) - 1
        return self.lines[position] if position >= 0 else None


@dataclass
class CodeIndex:
    """Every load, searchable by address and time."""

    # Each load is listed under every page it covers: a lookup looks at the
    # loads over its own page only (a few), where a search by start had to
    # look left over everything within the largest load's size (JSC's
    # 100 KiB functions: 45 µs a lookup in bun's tsc). Pages past the
    # budget (a writer's absurd sizes) leave the load on a list of its own,
    # looked at newest first, bounded.
    _loads: list[CodeLoad] = field(default_factory=list)
    _pages: dict[int, list[CodeLoad]] = field(default_factory=dict)
    _unpaged: list[CodeLoad] = field(default_factory=list)
    _page_entries: int = 0

    def add(self, load: CodeLoad) -> None:
        self._loads.append(load)
        if load.size <= 0:
            return  # covers no address
        first, last = load.start >> PAGE_SHIFT, (load.end - 1) >> PAGE_SHIFT
        if self._page_entries + last - first + 1 > MAX_PAGE_ENTRIES:
            self._unpaged.append(load)
            return
        self._page_entries += last - first + 1
        pages = self._pages
        for page in range(first, last + 1):
            listed = pages.get(page)
            if listed is None:
                pages[page] = [load]
            else:
                listed.append(load)

    def lookup(self, address: int, time_ns: int | None = None) -> CodeLoad | None:
        """The newest code over `address` loaded by `time_ns` (by any time when None)."""
        best: CodeLoad | None = None
        for listed in (self._pages.get(address >> PAGE_SHIFT), self._unpaged):
            if not listed:
                continue
            for load in listed[-MAX_OVERLAP_SCAN:] if len(listed) > MAX_OVERLAP_SCAN else listed:
                if load.start <= address < load.start + load.size and (time_ns is None or load.time_ns <= time_ns):
                    if best is None or (load.time_ns, load.sequence) > (best.time_ns, best.sequence):
                        best = load
        return best

    def __len__(self) -> int:
        return len(self._loads)


@dataclass
class JitdumpReader:
    """Feeds on a file's bytes as they appear; `records` counts what was used."""

    header: JitdumpHeader | None = None
    code: CodeIndex = field(default_factory=CodeIndex)
    error: str = ""  # why reading stopped, if it did
    closed: bool = False  # the writer wrote its CLOSE record
    records: int = 0
    moves: int = 0
    unwinding_records: int = 0
    insane_debug_records: int = 0  # debug info with garbage in it, ignored
    unknown_records: int = 0
    last_time_ns: int = 0  # the newest record read: what came before it is all written
    debug_lines: int = 0  # held by the loads
    _buffer: bytearray = field(default_factory=bytearray)
    _consumed: int = 0
    _pending_debug: dict[int, tuple[DebugLine, ...]] = field(default_factory=dict)

    @property
    def stopped(self) -> bool:
        return bool(self.error) or self.closed

    @property
    def bytes_read(self) -> int:
        return self._consumed

    def feed(self, data: bytes) -> int:
        """Parse what `data` completes; returns the number of new code loads."""
        if self.stopped:
            return 0
        self._buffer += data
        loads_before = len(self.code)
        offset = 0
        view = memoryview(bytes(self._buffer))  # a copy: the buffer is trimmed below
        try:
            if self.header is None:
                offset = self._parse_header(view)
                if self.header is None:
                    return 0
            while not self.stopped and len(view) - offset >= RECORD_HEADER.size:
                kind, size, timestamp = RECORD_HEADER.unpack_from(view, offset)
                if size < RECORD_HEADER.size or size > MAX_RECORD_BYTES:
                    raise JitdumpError(f"record {self.records + 1} at byte {self._consumed + offset} claims {size} bytes")
                if len(view) - offset < size:
                    break  # the rest is not written yet
                self._record(kind, timestamp, view[offset + RECORD_HEADER.size : offset + size])
                self.last_time_ns = max(self.last_time_ns, timestamp)
                offset += size
                self.records += 1
                if self._consumed + offset > MAX_FILE_BYTES:
                    raise JitdumpError(f"stopped at the {MAX_FILE_BYTES:,} byte limit")
        except JitdumpError as error:
            self.error = str(error)
        finally:
            view.release()
            del self._buffer[:offset]
            self._consumed += offset
        return len(self.code) - loads_before

    def _parse_header(self, view: memoryview) -> int:
        if len(view) >= 4:
            (magic,) = struct.unpack_from("<I", view, 0)
            if magic == MAGIC_SWAPPED:
                raise JitdumpError("the dump was written with the other byte order")
            if magic != MAGIC:
                raise JitdumpError(f"bad magic 0x{magic:08x}, not a jitdump")
        if len(view) < HEADER.size:
            return 0
        _magic, version, header_size, machine, _pad, pid, timestamp, flags = HEADER.unpack_from(view, 0)
        if version != 1:
            raise JitdumpError(f"jitdump version {version}, only version 1 is known")
        if header_size < HEADER.size or header_size > 4096:
            raise JitdumpError(f"header claims {header_size} bytes")
        if flags & FLAG_ARCH_TIMESTAMP:
            raise JitdumpError("timestamps are TSC ticks, not CLOCK_MONOTONIC (the runtime's arch-timestamp mode)")
        if len(view) < header_size:
            return 0
        self.header = JitdumpHeader(version, machine, pid, timestamp, flags)
        return header_size

    def _record(self, kind: int, timestamp: int, body: memoryview) -> None:
        if len(self.code) >= MAX_CODE_LOADS:
            raise JitdumpError(f"stopped at its limit of {MAX_CODE_LOADS:,} code loads")
        if self.debug_lines >= MAX_DEBUG_LINES:
            raise JitdumpError(f"stopped at its limit of {MAX_DEBUG_LINES:,} source lines")
        if kind == RecordType.CODE_LOAD:
            self._load(timestamp, body)
        elif kind == RecordType.CODE_MOVE:
            self._move(timestamp, body)
        elif kind == RecordType.CODE_DEBUG_INFO:
            self._debug_info(body)
        elif kind == RecordType.CODE_CLOSE:
            self.closed = True
        elif kind == RecordType.CODE_UNWINDING_INFO:
            self.unwinding_records += 1  # eh_frame for JIT code: the BPF walker uses frame pointers there
        else:
            self.unknown_records += 1  # a newer record type: skipped by its size

    def _load(self, timestamp: int, body: memoryview) -> None:
        if len(body) < LOAD.size + 1:
            raise JitdumpError(f"code load record {self.records + 1} is {len(body)} bytes, too short")
        _pid, _tid, _vma, code_address, code_size, code_index = LOAD.unpack_from(body, 0)
        name_end = _find_nul(body, LOAD.size, MAX_NAME_BYTES)
        if name_end < 0:
            raise JitdumpError(f"code load record {self.records + 1} has no terminated name")
        if code_size == 0 or code_size > MAX_RECORD_BYTES or code_address + code_size > 1 << 64:
            raise JitdumpError(f"code load record {self.records + 1} claims {code_size} bytes of code at 0x{code_address:x}")
        name = bytes(body[LOAD.size : name_end]).decode("utf-8", "replace")
        lines = self._pending_debug.pop(code_address, ())
        from_v8 = parse_v8_name(name) is not None
        if lines and from_v8:
            lines = tuple(DebugLine(line.address - V8_DEBUG_ADDRESS_BIAS, line.line, line.column, line.file) for line in lines)
        self.debug_lines += len(lines)
        self.code.add(CodeLoad(code_address, code_size, name, code_index, timestamp, self.records, lines, from_v8))

    def _move(self, timestamp: int, body: memoryview) -> None:
        if len(body) < MOVE.size:
            raise JitdumpError(f"code move record {self.records + 1} is {len(body)} bytes, too short")
        _pid, _tid, _vma, old_address, new_address, code_size, _index = MOVE.unpack_from(body, 0)
        moved = self.code.lookup(old_address)
        if moved is None or moved.start != old_address or code_size == 0 or code_size > MAX_RECORD_BYTES:
            return  # a move of code we never saw loaded: nothing to name
        self.moves += 1
        shift = new_address - old_address
        lines = tuple(DebugLine(line.address + shift, line.line, line.column, line.file) for line in moved.lines)
        self.debug_lines += len(lines)
        self.code.add(CodeLoad(new_address, code_size, moved.name, moved.index, timestamp, self.records, lines, moved.from_v8))

    def _debug_info(self, body: memoryview) -> None:
        """Lines for the next load at the same address; garbage makes the
        whole record ignored (V8 writes freed memory as user script names)."""
        if len(body) < DEBUG_INFO.size:
            raise JitdumpError(f"debug info record {self.records + 1} is {len(body)} bytes, too short")
        code_address, count = DEBUG_INFO.unpack_from(body, 0)
        offset = DEBUG_INFO.size
        lines: list[DebugLine] = []
        sane = count <= MAX_DEBUG_ENTRIES
        for _ in range(count if sane else 0):
            if len(body) - offset < DEBUG_ENTRY.size + 1:
                sane = False
                break
            address, line, column = DEBUG_ENTRY.unpack_from(body, offset)
            name_end = _find_nul(body, offset + DEBUG_ENTRY.size, MAX_NAME_BYTES)
            if name_end < 0:
                sane = False
                break
            file_name = _sane_file_name(bytes(body[offset + DEBUG_ENTRY.size : name_end]))
            if file_name is None:
                sane = False
                break
            lines.append(DebugLine(address, line, column, file_name))
            offset = name_end + 1
        # A record that did not end where its entries do was misparsed (an
        # embedded NUL in a name): none of it can be trusted.
        if not sane or len(body) - offset >= 8:
            self.insane_debug_records += 1
            return
        lines.sort(key=lambda line: line.address)
        self._pending_debug[code_address] = tuple(lines)
        if len(self._pending_debug) > 4096:  # never followed by their loads
            self._pending_debug.pop(next(iter(self._pending_debug)))


def _find_nul(body: memoryview, start: int, limit: int) -> int:
    end = min(len(body), start + limit)
    position = bytes(body[start:end]).find(b"\0")
    return start + position if position >= 0 else -1


def _sane_file_name(raw: bytes) -> str | None:
    """A file name a person could have written, or None for garbage."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if not text or len(text) > 4096 or any(ord(char) < 0x20 or 0x7F <= ord(char) < 0xA0 for char in text):
        return None
    return text


@dataclass
class JitdumpFile:
    """An open dump, read as it grows."""

    path: str
    descriptor: int
    reader: JitdumpReader = field(default_factory=JitdumpReader)
    offset: int = 0

    def tail(self) -> int:
        """Read what was appended; returns the number of new code loads."""
        added = 0
        while not self.reader.stopped and self.offset < MAX_FILE_BYTES:
            try:
                chunk = os.pread(self.descriptor, min(READ_CHUNK, MAX_FILE_BYTES - self.offset), self.offset)
            except OSError as error:
                self.reader.error = f"read failed: {error.strerror}"
                break
            if not chunk:
                break
            self.offset += len(chunk)
            added += self.reader.feed(chunk)
            if len(chunk) < READ_CHUNK:
                break
        if self.offset >= MAX_FILE_BYTES and not self.reader.error:
            self.reader.error = f"stopped at the {MAX_FILE_BYTES:,} byte limit"
        return added

    def close(self) -> None:
        try:
            os.close(self.descriptor)
        except OSError:
            pass
