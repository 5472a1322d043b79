"""What labels each sample carries, and where they are read: the one
interface the sampling path and the outputs know.

Per followed process, the symbolizer's thread (never the sampling thread:
the files and memory read are the target's; and no thread of its own, which
would cost the run 8 MiB of address space and more) finds what it publishes: the
OpenTelemetry process context (its resource attributes label all its
samples, and name its thread records' keys) and thread context (the kernel
reads each sample's record; here it is decoded). A sample's labels are
interned in the profile: Sample.labels is an index into profile.label_sets."""

from __future__ import annotations

import functools
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from profiler.kernel.process_memory import MemoryThread, ProcessMemory
from profiler.kernel.procmaps import MapEntry, read_maps
from profiler.labels import otel_process_context, otel_thread_context
from profiler.model.profile import NO_LABELS, Profile
from profiler.native import elf_format
from profiler.safety import files

MAX_PROCESSES = 4096
MAX_FILES_SCANNED = 256  # modules of one process looked at for a thread context pointer
MAX_MODULE_BYTES = 1 << 30
MAX_DECODED = 1 << 16  # (process, record bytes) -> label set, remembered
MAX_NOTED = 5  # processes named in the closing note
# An SDK publishes when the program sets it up, after jitprof first reads a
# process it starts: a process with nothing found is read again, as its
# samples come, this often, for a while.
RESCAN_S = 0.5
RESCAN_FOR_S = 10.0
TRACE_ID, SPAN_ID = "trace_id", "span_id"
CONTEXT_OTEL, CONTEXT_V8 = 0, 1  # a sample's record: an OpenTelemetry thread context's, or node's (bpf/jitprof_abi.h)


class ThreadContextKernel(Protocol):
    def set_thread_context(self, pid: int, offset: int) -> bool: ...

    def clear_thread_context(self, pid: int) -> None: ...


class RuntimeContexts(Protocol):
    """A runtime's own request context, read at the sample by the kernel
    (node's AsyncLocalStorage: profiler/jit/v8/async_context.py): records of
    kind CONTEXT_V8 are its to label."""

    def watch_soon(self, pid: int) -> None: ...

    def note(self, pid: int, data: bytes) -> None: ...

    def labels(self, pid: int, data: bytes) -> tuple[tuple[tuple[str, str], ...], bool]: ...

    def forget(self, pid: int) -> None: ...

    def warnings(self) -> list[str]: ...


@dataclass
class _Published:
    """What one process publishes."""

    process: otel_process_context.ProcessContext | None = None
    thread_offset: int | None = None  # of its context pointer from the thread pointer; None: none read
    dynamic_tls: bool = False  # it exports a context pointer jitprof cannot reach (TLS outside the static area)


class LabelSources:
    def __init__(
        self,
        profile: Profile,
        kernel: ThreadContextKernel | None,
        run_later: Callable[[Callable[[], None]], None] | None = None,
        runtime_contexts: RuntimeContexts | None = None,
    ) -> None:
        # run_later: call on the thread that labels samples, after the samples
        # submitted so far (None: at once, on the caller's).
        self._profile = profile
        self._kernel = kernel
        self._run_later = run_later
        self._published: dict[int, _Published] = {}
        self._decoded: dict[tuple[int, int, bytes], int] = {}
        self._module_descriptors: dict[tuple[int, int, int], int | None] = {}  # by file identity
        self._mappings_seen: dict[int, dict[tuple[int, int, int, str], int | None]] = {}  # per process: its descriptor
        self._lock = threading.Lock()
        self._labelled: dict[int, str] = {}  # processes whose samples carried labels, with their service name
        self._labelled_by_node: set[int] = set()  # ... read from their AsyncLocalStorage
        self._watched_at: dict[int, float] = {}  # when each process was first watched
        self._scanned_at: dict[int, float] = {}  # and last read
        self._node = runtime_contexts

    # Which processes ------------------------------------------------------

    def watch(self, pid: int) -> None:
        """(The sampling thread's call: it only queues.) A followed process,
        or one whose maps changed: read what it publishes."""
        if self._node is not None:
            self._node.watch_soon(pid)  # (already known: nothing more)
        if self._run_later is None:
            self._scan(pid)
        else:
            self._run_later(functools.partial(self._scan, pid))

    def discovered(self, pid: int) -> None:
        """(The sampling thread's call: it only queues.) A process found,
        before its maps are read: a node's async context is read from then on."""
        if self._node is not None:
            self._node.watch_soon(pid)

    def forget(self, pid: int) -> None:
        with self._lock:
            self._published.pop(pid, None)
            self._watched_at.pop(pid, None)
            self._scanned_at.pop(pid, None)
            self._mappings_seen.pop(pid, None)
        if self._kernel is not None:
            self._kernel.clear_thread_context(pid)
        if self._node is not None:
            self._node.forget(pid)

    def _scan(self, pid: int) -> None:
        now = time.monotonic()
        with self._lock:
            if len(self._watched_at) >= MAX_PROCESSES and pid not in self._watched_at:
                return
            self._watched_at.setdefault(pid, now)
            self._scanned_at[pid] = now
        try:
            found = self._read(pid, read_maps(pid, naming=otel_process_context.MAPPING_NAMES))
        except (OSError, ValueError):
            return
        with self._lock:
            self._published[pid] = found
        if self._kernel is not None and found.thread_offset is not None:
            self._kernel.set_thread_context(pid, found.thread_offset)

    def _due_again(self, pid: int, now: float) -> bool:
        """Has pid published nothing yet, while young, and not been read for RESCAN_S?"""
        since = self._watched_at.get(pid)
        return (
            since is not None
            and now - since < RESCAN_FOR_S
            and now - self._scanned_at.get(pid, 0.0) >= RESCAN_S
            and not _publishes(self._published.get(pid))
        )

    def _read(self, pid: int, entries: Sequence[MapEntry]) -> _Published:
        found = _Published()
        context_at = otel_process_context.context_address(entries)
        if context_at is None:
            # A thread context's keys are named by the process context (the
            # specification reads that first): without one, no module of the
            # process is opened (a process forking without end costs its maps).
            return found
        descriptors = self._descriptors(pid, entries)
        memory = ProcessMemory(pid)
        reader = MemoryThread(memory)
        try:
            found.process = reader.run(lambda: otel_process_context.read_process_context(memory, context_at))
            for descriptor_at in descriptors:
                offset = reader.run(functools.partial(otel_thread_context.thread_pointer_offset, memory, descriptor_at))
                if offset is not None:
                    found.thread_offset = offset
                    break
                found.dynamic_tls = True
        finally:
            reader.close()
        return found

    def _descriptors(self, pid: int, entries: Sequence[MapEntry]) -> list[int]:
        """The process's addresses of the TLSDESC descriptors of modules that
        export a context pointer. A mapping looked at before (its range, file
        and device as the maps say) is not opened again."""
        found: list[int] = []
        known = self._mappings_seen.setdefault(pid, {})
        opened = 0
        for entry in entries:
            if not entry.is_file_backed or entry.offset != 0:
                continue
            key = (entry.start, entry.end, entry.inode, entry.device)
            if key in known:
                remembered = known[key]
                if remembered is not None:
                    found.append(remembered)
                continue
            if opened >= MAX_FILES_SCANNED or len(known) >= MAX_FILES_SCANNED:
                break
            opened += 1
            known[key] = address = self._descriptor_of(pid, entry)
            if address is not None:
                found.append(address)
        return found

    def _descriptor_of(self, pid: int, entry: MapEntry) -> int | None:
        path = f"/proc/{pid}/map_files/{entry.start:x}-{entry.end:x}"
        try:
            with files.open_regular(path, MAX_MODULE_BYTES) as handle:
                status = os.fstat(handle.fileno())
                identity = (status.st_dev, status.st_ino, status.st_mtime_ns)
                if identity not in self._module_descriptors:
                    if len(self._module_descriptors) >= MAX_PROCESSES:
                        self._module_descriptors.clear()
                    self._module_descriptors[identity] = otel_thread_context.descriptor_address(handle)
                descriptor = self._module_descriptors[identity]
                if descriptor is None:
                    return None
                segments, _build_id = elf_format.read_load_segments_and_build_id(handle)
                return elf_format.load_bias(entry.start, entry.offset, segments) + descriptor
        except (OSError, ValueError):
            return None

    # Labelling samples (the symbolizer's thread) -------------------------

    def note_sample(self, pid: int, record: bytes, kind: int) -> None:
        """(The sampling thread's call: it only queues.) A sample as it comes up."""
        if kind == CONTEXT_V8 and self._node is not None:
            self._node.note(pid, record)

    def look_again(self, pid: int) -> None:
        """(The symbolizer's thread.) Read again what pid publishes, if it has
        published nothing yet and is due (as its samples are labelled, or as
        they wait to be named after it exits, while it lives)."""
        if self._due_again(pid, time.monotonic()):
            self._scan(pid)

    def label_id(self, pid: int, record: bytes, kind: int = CONTEXT_OTEL) -> int:
        """The label set of a sample of pid whose thread's context record
        (of kind) the kernel read (b"": none)."""
        self.look_again(pid)
        published = self._published.get(pid)
        if published is None or published.process is None and not record:
            return NO_LABELS
        key = (pid, kind, record)
        known = self._decoded.get(key)
        if known is not None:
            return known
        process = published.process
        labels: list[tuple[str, str]] = list(process.resource) if process is not None else []
        if kind == CONTEXT_V8:
            found, cache = self._node.labels(pid, record) if self._node is not None else ((), True)
            labels += found
        else:
            context = otel_thread_context.decode_record(record, process.thread_keys if process is not None else ())
            if context is not None and context.trace_id:
                labels += [(TRACE_ID, context.trace_id), (SPAN_ID, context.span_id)]
            if context is not None:
                labels += context.attributes
            cache = True
        label_id = self._profile.intern_labels(tuple(labels))
        if len(self._decoded) >= MAX_DECODED:
            self._decoded.clear()
        if cache:
            self._decoded[key] = label_id
        if label_id != NO_LABELS and pid not in self._labelled and len(self._labelled) < MAX_PROCESSES:
            self._labelled[pid] = dict(labels).get("service.name", "")
            if kind == CONTEXT_V8:
                self._labelled_by_node.add(pid)
        return label_id

    def warnings(self) -> list[str]:
        with self._lock:
            unreachable = [pid for pid, found in self._published.items() if found.dynamic_tls and found.thread_offset is None]
        notes = self._node.warnings() if self._node is not None else []
        for source, pids in (
            ("the OpenTelemetry context", [pid for pid in self._labelled if pid not in self._labelled_by_node]),
            ("the AsyncLocalStorage", [pid for pid in self._labelled if pid in self._labelled_by_node]),
        ):
            if not pids:
                continue
            named = ", ".join(f"{pid} ({self._labelled[pid]})" if self._labelled[pid] else str(pid) for pid in pids[:MAX_NOTED])
            more = f" and {len(pids) - MAX_NOTED} more" if len(pids) > MAX_NOTED else ""
            notes.append(f"jitprof: note: samples labelled with {source} of process {named}{more}")
        notes += [
            f"jitprof: note: process {pid} publishes an OpenTelemetry thread context in a module loaded after its start "
            "(its thread-local storage is not in the static area): its threads' records were not read"
            for pid in unreachable[:MAX_NOTED]
        ]
        return notes


def _publishes(found: _Published | None) -> bool:
    return found is not None and (found.process is not None or found.thread_offset is not None)
