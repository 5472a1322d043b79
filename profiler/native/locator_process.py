"""Native code named by blazesym in a confined helper process, never in
jitprof's own: blazesym maps and parses files a target controls (a file
truncated under its mapping is a SIGBUS, a crafted DWARF a Rust panic or a
stack overflow, a debug link to a FIFO a hang, a compressed section a
memory blow-up). In the helper each of those costs the names of the file
that caused it, nothing else.

jitprof opens every file itself (safely) and hands the helper its
descriptor over a Unix socket; the helper answers each request in JSON,
which jitprof checks as it would any target's text. A helper that dies,
overruns DEADLINE_S or answers nonsense is killed, the file it was reading
is noted as unreadable (and, for a file of another user than root, that
user's files are no longer handed to blazesym: one user cannot cost the
others more than one deadline), and the next request starts a fresh helper.
Frames of such files are named from their symbol tables (read by jitprof's
own bounded reader) as before.

The helper's limits (sandbox.confine): ADDRESS_SPACE_BYTES, DATA_BYTES, no
core, its own uid, CAP_DAC_READ_SEARCH only, a seccomp filter.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from profiler.native.blazesym import HEADER_PATH, LIBRARY_PATH, InlinedCall, NativeSymbol, SourcePlace
from profiler.native.dwarf_declarations import DeclaredLines
from profiler.native.dwarf_declarations import preload as preload_declarations
from profiler.native.library import NativeUnavailable
from profiler.safety.processes import TRUSTED_DIRECTORY, trusted_environment

DEADLINE_S = 3.0  # one request: node's first lookup takes 50 ms, libpython's 11 ms
START_DEADLINE_S = 10.0  # Python, cffi and blazesym's header: ~0.2 s on an idle machine
ADDRESS_SPACE_BYTES = 3 << 30  # files are mapped whole: node's 100 MiB, a large debug file's GiB
# What blazesym allocates (heap, not mapped files): naming node takes 12 MiB,
# a real program's DWARF some KiB per compile unit; 2 M crafted units took 1.8 GiB.
DATA_BYTES = 512 << 20
CPU_SECONDS = 3600  # a backstop; the deadline ends a runaway request first
OPEN_FILES = 16384
MAX_ANSWER_BYTES = 16 << 20
MAX_REQUEST_BYTES = 16 << 20
MAX_FAILURES_KEPT = 100
MAX_INLINED_CALLS = 64  # per address: the outermost ones and the innermost (crafted DWARF nests thousands)
MAX_LINE = 10_000_000
_LENGTH = struct.Struct("=I")


class LocatorFailed(OSError):
    """The file cannot be named by blazesym (now or earlier in the run)."""


@dataclass
class _Helper:
    """The running helper process and the files it holds."""

    process: subprocess.Popen[bytes]
    channel: socket.socket
    known: set[int] = field(default_factory=set)  # file ids whose descriptor it holds

    def stop(self) -> str:
        """Kill it; how it ended, for the note."""
        self.channel.close()
        if self.process.poll() is None:
            self.process.kill()
        try:
            code = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return "did not exit"
        if code < 0:
            try:
                return f"died of {signal.Signals(-code).name}"
            except ValueError:
                return f"died of signal {-code}"
        return f"exited with status {code}"


class CodeLocator:
    """Names addresses of opened ELF files through the helper; one caller at
    a time (a lock serialises them)."""

    def __init__(self, deadline_s: float = DEADLINE_S) -> None:
        if not LIBRARY_PATH.exists() or not HEADER_PATH.exists():
            raise NativeUnavailable(f"{LIBRARY_PATH} is not built; run `make setup` (it builds native/ with cargo)")
        self._deadline_s = deadline_s
        self._lock = threading.Lock()
        self._helper: _Helper | None = None
        self._ids: dict[BinaryIO, int] = {}
        self._next_id = 1
        self._failed_files: set[tuple[int, int]] = set()
        self._failed_owners: set[int] = set()
        self.failures: dict[str, str] = {}  # file: why blazesym could not read it (the first MAX_FAILURES_KEPT)
        self.helpers_started = 0
        self._unavailable = ""  # why the helper could not start: not tried again

    def locate(self, handle: BinaryIO, vaddrs: list[int], label: str = "") -> list[NativeSymbol | None]:
        """The symbols at file virtual addresses of the open file; None where
        blazesym names nothing. LocatorFailed (an OSError) when the file
        cannot be read or made the helper fail, now or before.

        A function is named by the symbol table, as perf and addr2line name it
        (DWARF drops the clone suffixes `.part.0`, `.cold`, `.isra.0` and
        picks other aliases); its lines and inlined functions come from DWARF."""
        if not vaddrs:
            return []
        info = os.fstat(handle.fileno())
        identity = (info.st_dev, info.st_ino)
        with self._lock:
            if self._unavailable:
                raise LocatorFailed(self._unavailable)
            if identity in self._failed_files or info.st_uid in self._failed_owners:
                raise LocatorFailed(f"{label or 'file'}: blazesym failed on it or on another file of its owner")
            try:
                return self._ask(handle, vaddrs)
            except _HelperFailed as failure:
                self._failed_files.add(identity)
                if info.st_uid != 0:
                    self._failed_owners.add(info.st_uid)
                if len(self.failures) < MAX_FAILURES_KEPT:
                    self.failures[label or f"inode {info.st_ino}"] = str(failure)
                raise LocatorFailed(f"{label or 'file'}: {failure}") from None

    def _ask(self, handle: BinaryIO, vaddrs: list[int]) -> list[NativeSymbol | None]:
        helper = self._running()
        closed_ids = [self._ids.pop(opened) for opened in [opened for opened in self._ids if opened.closed]]
        forgotten = [file_id for file_id in closed_ids if file_id in helper.known]
        helper.known.difference_update(forgotten)
        file_id = self._ids.get(handle)
        if file_id is None:
            file_id = self._ids[handle] = self._next_id
            self._next_id += 1
        request = {"file": file_id, "addresses": vaddrs, "forget": forgotten}
        descriptors = [] if file_id in helper.known else [handle.fileno()]
        deadline = time.monotonic() + self._deadline_s
        try:
            helper.channel.settimeout(self._deadline_s)
            _send(helper.channel, request, descriptors)
            helper.known.add(file_id)
            answer = _receive(helper.channel, deadline, MAX_ANSWER_BYTES)
            if isinstance(answer, dict) and isinstance(answer.get("error"), str):
                refusal = answer["error"][:500]  # a file it refused, not a failure
                raise LocatorFailed(refusal if refusal.startswith("blazesym: ") else f"blazesym: {refusal}")
            symbols = _symbols_from(answer, len(vaddrs))
        except LocatorFailed:
            raise
        except _HelperFailed:
            self._helper = None
            raise _HelperFailed(f"blazesym's helper {helper.stop()} while reading it") from None
        except (OSError, ValueError, TypeError, KeyError) as error:
            self._helper = None
            how = "overran its deadline" if isinstance(error, TimeoutError) else f"failed ({error})"
            raise _HelperFailed(f"blazesym's helper {how} while reading it; {helper.stop()}") from None
        return symbols

    def _running(self) -> _Helper:
        if self._helper is not None and self._helper.process.poll() is None:
            return self._helper
        if self._helper is not None:
            self._helper.stop()
            self._helper = None
        # Started at the first request, not ahead: a warm run's addresses are
        # mostly named from what earlier runs kept, and a helper started
        # beside the program took its CPU (~0.1 s) whether asked or not.
        helper = self._spawn()
        try:
            ready = _receive(helper.channel, time.monotonic() + START_DEADLINE_S, 1024)
        except (OSError, ValueError, _HelperFailed) as error:
            ready = f"{type(error).__name__}: {error}"
        if ready != {"ready": True}:
            self._unavailable = f"blazesym's helper could not start ({str(ready)[:300]}; it {helper.stop()})"
            self.failures.setdefault("(every file)", self._unavailable)
            raise LocatorFailed(self._unavailable)
        self._helper = helper
        return helper

    def _spawn(self) -> _Helper:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            process = subprocess.Popen(
                [sys.executable, "-I", "-m", "profiler.native.locator_process", str(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,  # blazesym's panic messages are not the user's business
                pass_fds=(theirs.fileno(),),
                cwd=TRUSTED_DIRECTORY,
                env=trusted_environment(),
                start_new_session=True,  # Ctrl-C is jitprof's to handle, not the helper's
            )
        finally:
            theirs.close()
        self.helpers_started += 1
        return _Helper(process, ours)

    def close(self) -> None:
        with self._lock:
            if self._helper is not None:
                self._helper.stop()
            self._helper = None
            self._ids.clear()


class _HelperFailed(Exception):
    pass


def _send(channel: socket.socket, message: Any, descriptors: list[int]) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    frame = _LENGTH.pack(len(body)) + body
    sent = socket.send_fds(channel, [frame], descriptors) if descriptors else channel.send(frame)
    if sent < len(frame):
        channel.sendall(frame[sent:])


def _receive(channel: socket.socket, deadline: float, max_bytes: int, descriptors: list[int] | None = None) -> Any:
    """One framed JSON message (its descriptors, if any, into the list);
    TimeoutError past the deadline, _HelperFailed when the peer is gone."""
    header = _read_exactly(channel, _LENGTH.size, deadline, descriptors)
    (length,) = _LENGTH.unpack(header)
    if length > max_bytes:
        raise ValueError(f"a message of {length} bytes")
    return json.loads(_read_exactly(channel, length, deadline, None))


def _read_exactly(channel: socket.socket, count: int, deadline: float, descriptors: list[int] | None) -> bytes:
    chunks: list[bytes] = []
    wanted = count
    while wanted:
        if deadline != float("inf"):
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("deadline")
            channel.settimeout(left)
        try:
            if descriptors is not None:
                data, received, _flags, _address = socket.recv_fds(channel, min(wanted, 1 << 20), 16)
                descriptors.extend(received)
            else:
                data = channel.recv(min(wanted, 1 << 20))
        except ConnectionError as error:
            raise _HelperFailed(str(error)) from None
        if not data:
            raise _HelperFailed("closed")
        chunks.append(data)
        wanted -= len(data)
    return b"".join(chunks)


# --- What the helper answers, checked as a target's text ----------------------


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError("not a string")
    return value


def _number(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value < 1 << 64:
        raise TypeError("not an address or line")
    return value


def _place_from(value: Any) -> SourcePlace | None:
    if value is None:
        return None
    file, line, column = value
    return SourcePlace(_text(file), _number(line), _number(column))


def _inlined_call_from(call: Any) -> InlinedCall:
    if not isinstance(call, list) or len(call) not in (2, 3):
        raise TypeError("not an inlined function")
    line = _number(call[2]) if len(call) == 3 else 0
    return InlinedCall(_text(call[0]), _place_from(call[1]), line if line <= MAX_LINE else 0)


def _symbols_from(answer: Any, count: int) -> list[NativeSymbol | None]:
    if not isinstance(answer, dict):
        raise TypeError("not an answer")
    symbols = answer["symbols"]
    if not isinstance(symbols, list) or len(symbols) != count:
        raise TypeError("not one symbol per address")
    located: list[NativeSymbol | None] = []
    for symbol in symbols:
        if symbol is None:
            located.append(None)
            continue
        name, start, place, inlined = symbol
        if not isinstance(inlined, list):
            raise TypeError("not a list of inlined functions")
        if len(inlined) > MAX_INLINED_CALLS:
            inlined = inlined[: MAX_INLINED_CALLS - 1] + inlined[-1:]
        calls = tuple(_inlined_call_from(call) for call in inlined)
        located.append(NativeSymbol(_text(name), _number(start), _place_from(place), calls))
    return located


def answer_of(symbols: list[NativeSymbol | None]) -> list[Any]:
    """Symbols in the form the helper answers in (kept so on disk: located_names)."""
    return [
        None
        if symbol is None
        else [
            symbol.name,
            symbol.start,
            _place_to(symbol.place),
            [[call.name, _place_to(call.place), call.start_line] for call in symbol.inlined],
        ]
        for symbol in symbols
    ]


def symbols_of(answer: Any) -> list[NativeSymbol | None]:
    """An answer in that form read back, checked as the helper's own are
    (TypeError, ValueError or KeyError when it is not one)."""
    if not isinstance(answer, list):
        raise TypeError("not a list of symbols")
    return _symbols_from({"symbols": answer}, len(answer))


# --- The helper ---------------------------------------------------------------


def _place_to(place: SourcePlace | None) -> list[Any] | None:
    return None if place is None else [place.file, place.line, place.column]


def _serve(channel: socket.socket) -> None:
    from profiler.native.blazesym import BlazesymLocator  # noqa: PLC0415  (loads cffi and the library)
    from profiler.safety.sandbox import confine  # noqa: PLC0415

    locator = BlazesymLocator()
    preload_declarations()
    confine(ADDRESS_SPACE_BYTES, DATA_BYTES, CPU_SECONDS, OPEN_FILES)
    _send(channel, {"ready": True}, [])
    files: dict[int, BinaryIO] = {}
    declarations: dict[int, DeclaredLines | None] = {}  # None: its DWARF could not be read
    while True:
        descriptors: list[int] = []
        try:
            request = _receive(channel, float("inf"), MAX_REQUEST_BYTES, descriptors)
        except _HelperFailed:
            return  # jitprof closed its end
        for file_id in request["forget"]:
            forgotten = files.pop(file_id, None)
            declarations.pop(file_id, None)
            if forgotten is not None:
                forgotten.close()  # the locator renews its symbolizer once enough are closed
        file_id = request["file"]
        if descriptors:
            files[file_id] = os.fdopen(descriptors[0], "rb")
            for extra in descriptors[1:]:
                os.close(extra)
        handle = files.get(file_id)
        if handle is None:
            _send(channel, {"error": "no descriptor for the file"}, [])
            continue
        try:
            located = locator.locate(handle, request["addresses"])
        except (OSError, ValueError) as error:
            _send(channel, {"error": str(error)}, [])
            continue
        answer: list[list[Any] | None] = []
        for address, symbol in zip(request["addresses"], located, strict=True):
            if symbol is None:
                answer.append(None)
                continue
            lines = _declared_lines(declarations, file_id, handle, address, [call.name for call in symbol.inlined])
            answer.append(
                [
                    symbol.name,
                    symbol.start,
                    _place_to(symbol.place),
                    [[call.name, _place_to(call.place), line] for call, line in zip(symbol.inlined, lines, strict=True)],
                ]
            )
        _send(channel, {"symbols": answer}, [])


def _declared_lines(
    declarations: dict[int, DeclaredLines | None], file_id: int, handle: BinaryIO, address: int, names: list[str]
) -> list[int]:
    """The inlined functions' declared lines (0: unknown). A file whose DWARF
    pyelftools cannot read is not asked again."""
    if not names:
        return []
    if file_id not in declarations:
        declarations[file_id] = DeclaredLines(handle)
    declared = declarations[file_id]
    if declared is None:
        return [0] * len(names)
    try:
        return declared.lines(address, names)
    except Exception:  # noqa: BLE001  (pyelftools raises its own kinds on crafted DWARF)
        declarations[file_id] = None
        return [0] * len(names)


def main() -> None:
    channel = socket.socket(fileno=int(sys.argv[1]))
    try:
        _serve(channel)
    except Exception as error:  # noqa: BLE001  (the parent reads the reason)
        try:
            _send(channel, {"error": f"{type(error).__name__}: {error}"[:500]}, [])
        except OSError:
            pass
        sys.exit(1)


if __name__ == "__main__":
    main()
