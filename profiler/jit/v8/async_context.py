"""Node's AsyncLocalStorage as a label source (profiler/labels/
label_sources.py's RuntimeContexts): the OpenTelemetry JS SDK's active
span, and a store --label-store names, read with no change to the program.

Node 24 on (and 22 with --experimental-async-context-frame) keeps every
AsyncLocalStorage's store in the isolate's continuation-preserved embedder
data: the current AsyncContextFrame, a JSMap from each AsyncLocalStorage to
its store. The kernel reads it at each sample (bpf/v8_context.bpf.h) down
to the span's trace and span ids, by the keys and maps (hidden classes)
learned here from the process's heap: the OpenTelemetry context manager's
AsyncLocalStorage, the context's span key (a Symbol), and where a Context,
a span and a span context keep what is read. Objects move in V8's heap, so
nothing read here later stands for what a sample saw: the ids come from the
kernel, and a span's name and attributes only from the span at the address
the sample found, while that span still holds the same span id.
"""

from __future__ import annotations

import copy
import os
import queue
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from profiler.jit.v8.heap.isolate import IsolateLocations
from profiler.jit.v8.heap.layout import LayoutError, V8Layout, layout_of_file
from profiler.jit.v8.heap.objects import HeapReader
from profiler.jit.v8.heap.properties import Properties
from profiler.kernel.process_memory import MemoryThread, ProcessMemory
from profiler.labels import context_reader_memo

MAPS_KNOWN = 4  # per object read (the kernel's V8_CONTEXT_MAPS)
FRAME_ENTRIES = 8  # of a frame's or a context's table (the kernel's V8_CONTEXT_ENTRIES)
LEARN_EVERY_S = 0.02  # a process's heap is looked at for what the kernel lacks at most this often
MAX_LEARNS = 2000  # per process
MAX_HINTS = 64  # frames queued for learning (past this, new ones are dropped)
MAX_MAPS_TRIED = 1024  # per process
HINT_FRAME, HINT_MAP, HINT_WATCH = 0, 1, 2  # what the learner's thread is asked
LEARNER_STACK_BYTES = 512 << 10
# The kernel wakes the ring's reader with a sample whose read stopped short
# while learning is on: until all is learned, or this many learns in a row
# taught nothing (a process whose stores are not the SDK's).
MAX_FRUITLESS_WAKES = 20
MAX_SPANS = 1 << 14  # spans named, per process
SPAN_READS = 4  # of a span, to name it, while it moves before it is read
MAX_PROCESSES = 4096
MAX_TEXT = 256  # of a span's name or an attribute's value
MAX_NOTED = 5  # processes named in a closing note
FRAMES_BY_DEFAULT = (13, 0)  # node 24's V8: AsyncLocalStorage in async context frames without a flag
SPAN_KEY = "Symbol(OpenTelemetry Context Key SPAN)"
CONTEXT_FIELD = "_currentContext"
SPAN_CONTEXT_FIELD = "_spanContext"
TRACE_ID_FIELD, SPAN_ID_FIELD = "traceId", "spanId"
ATTRIBUTES_FIELD, ROUTE_ATTRIBUTE = "attributes", "http.route"
# A span's attributes carried as labels, under the names the labels use
# (its route comes from the kernel, read at the sample).
SPAN_ATTRIBUTES = {"http.request.method": "http.method", "http.method": "http.method"}
RECORD = struct.Struct("<BBB5xQQ16s8sQ" + "BB18s" * 3 + "28s32s")  # struct v8_context_record
ROUTE_CHARS = 28  # of a span's http.route the kernel reads (V8_ROUTE_CHARS)
SPAN_NAME_CHARS = 32  # and of its name (V8_SPAN_NAME_CHARS)
NAME_FIELD = "name"
ROUTE_UNKNOWN = 255  # a record's route length: the span's attributes are of a map not known
STORE_FIELDS = 3  # of a labelled store the kernel reads (V8_STORE_FIELDS)
STORE_TEXT = 18  # characters of a field's string (V8_STORE_TEXT)
FIELD_STRING, FIELD_SMI, FIELD_DOUBLE = 1, 2, 3
MAX_STORE_KEY = 64  # characters of a labelled store's field name kept
REACHED_FRAME, REACHED_STORE, REACHED_CONTEXT, REACHED_SPAN, REACHED_IDS = 1, 2, 3, 4, 5


@dataclass(frozen=True)
class Record:
    reached: int
    frame: int
    object: int  # where the read stopped; with REACHED_IDS the span
    trace_id: str
    span_id: str
    store_map: int = 0  # the labelled store's map (0: none read)
    store_fields: tuple[str | None, ...] = ()  # its fields' values as text (None: not read)
    route: str | None = None  # the span's http.route (its first ROUTE_CHARS characters)
    route_unknown: bool = False  # its attributes were of a map not known
    span_name: str | None = None  # the span's name (its first SPAN_NAME_CHARS characters), read at the sample


def decode_record(data: bytes) -> Record | None:
    if len(data) < RECORD.size:
        return None
    reached, route_length, name_length, frame, where, trace_id, span_id, store_map, *rest = RECORD.unpack_from(data)
    fields, route, name = rest[:-2], rest[-2], rest[-1]
    trace, span = trace_id.hex(), span_id.hex()
    if reached == REACHED_IDS and not (_is_id(trace) and _is_id(span)):
        reached = REACHED_SPAN  # not ids as the SDK makes them: no label
    values = tuple(_field_text(*fields[index * 3 : index * 3 + 3]) for index in range(STORE_FIELDS))
    known_route = 0 < route_length < ROUTE_UNKNOWN
    text = route[: min(route_length, ROUTE_CHARS)].decode("latin-1") if known_route else None
    span_name = name[: min(name_length, SPAN_NAME_CHARS)].decode("latin-1") if name_length else None
    return Record(reached, frame, where, trace, span, store_map, values, text, route_length == ROUTE_UNKNOWN, span_name)


def _field_text(kind: int, length: int, text: bytes) -> str | None:
    if kind == FIELD_STRING:
        return text[: min(length, STORE_TEXT)].decode("latin-1")
    if kind == FIELD_SMI:
        return str(struct.unpack_from("<i", text)[0])
    if kind == FIELD_DOUBLE:
        number = struct.unpack_from("<d", text)[0]
        return str(int(number)) if number.is_integer() and abs(number) < 1 << 53 else repr(number)
    return None


def _is_id(text: str) -> bool:
    return set(text) != {"0"}


@dataclass
class _Learned:
    """What the kernel is given for one process (struct v8_context_config)."""

    store_key: int = 0
    span_key: int = 0
    contexts: dict[int, int] = field(default_factory=dict)  # map -> slot of its JSMap
    # map -> slots of its span context, its attributes and its name (0: none)
    spans: dict[int, tuple[int, int, int]] = field(default_factory=dict)
    span_contexts: dict[int, tuple[int, int]] = field(default_factory=dict)  # map -> slots of its ids
    attributes: dict[int, int] = field(default_factory=dict)  # map -> slot of http.route (0: none)
    label_store_key: int = 0
    label_stores: dict[int, tuple[tuple[str, int], ...]] = field(default_factory=dict)  # map -> its fields read: names, slots

    def key(self) -> tuple[object, ...]:
        return (
            self.store_key,
            self.span_key,
            tuple(self.contexts.items()),
            tuple(self.spans.items()),
            tuple(self.span_contexts.items()),
            tuple(self.attributes.items()),
            self.label_store_key,
            tuple(self.label_stores.items()),
        )


@dataclass
class _Process:
    pid: int
    layout: V8Layout
    base: dict[str, object]  # the config's fixed part
    memory: ProcessMemory
    thread: MemoryThread
    properties: Properties
    learned: _Learned = field(default_factory=_Learned)
    learned_at: float = 0.0
    learns: int = 0
    fruitless: int = 0  # learns in a row that taught nothing
    waking: bool = True  # the kernel wakes us with a record that stopped short
    maps_tried: set[int] = field(default_factory=set)  # maps the kernel sent as not known, looked at
    spans: dict[str, tuple[tuple[tuple[str, str], ...], int]] = field(default_factory=dict)  # span id -> its labels, reads
    reached: dict[int, int] = field(default_factory=dict)  # records by how far the kernel read


class NodeContexts:
    """Per node process: the kernel's settings, learned and updated here,
    and the labels of the records its samples carry. labels() runs on the
    symbolizer's thread; note() and watch_soon() on the sampling thread,
    where they only queue; watching and learning on a thread of its own."""

    def __init__(self, kernel: object, label_store: str = "", runs_node: Callable[[int], bool] = lambda _pid: True) -> None:
        # label_store: a field name; the AsyncLocalStorage store that has it labels samples with its fields.
        # runs_node: is a live process a node (by its executable's name first)? Others are not read.
        self._kernel = kernel
        self._label_store = label_store
        self._runs_node = runs_node
        self._processes: dict[int, _Process] = {}
        self._refused: dict[int, str] = {}
        self._lock = threading.Lock()
        # Frames to learn from, as samples come up the ring buffer: a frame's
        # objects move within milliseconds (young objects, scavenged), so the
        # symbolizer, which can be seconds behind at a cold start, comes too late.
        self._hints: queue.Queue[tuple[int, int, int]] = queue.Queue(MAX_HINTS)  # pid, frame or map, which
        self._learner: threading.Thread | None = None

    def watch(self, pid: int) -> bool:
        """If pid runs a node whose async context the kernel can read, set it
        up; True if it did."""
        with self._lock:
            if pid in self._processes:
                return True
            if len(self._processes) >= MAX_PROCESSES:
                return False
        if not self._runs_node(pid):
            return False
        path = f"/proc/{pid}/exe"
        try:
            layout = layout_of_file(path)
        except (LayoutError, OSError, ValueError):
            return False  # not a node jitprof reads
        locations = layout.async_context
        _remember_frames(path, isinstance(locations, IsolateLocations) and layout.objects is not None)
        if not isinstance(locations, IsolateLocations):
            self._refuse(pid, f"V8 {layout.version[0]}.{layout.version[1]}: {locations}")
            return False
        if layout.objects is None:
            return False
        reader_problem = getattr(self._kernel, "context_reader_problem", lambda: None)()
        if reader_problem is not None:
            self._refuse(pid, reader_problem)
            return False
        try:
            memory = ProcessMemory(pid)
        except OSError:
            return False
        base: dict[str, object] = {
            "isolate_tls": locations.isolate_tls,
            "cped_offset": locations.embedder_data,
            "js_map_type": layout.objects.js_map_type,
            "first_nonstring_type": layout.first_nonstring_type,
            "map_type_at": layout.map_instance_type,
            "string_tag_mask": layout.string_representation_mask | layout.string_encoding_mask,
            "seq_one_byte_tag": layout.one_byte_string_tag,
            "sliced_one_byte_tag": layout.sliced_string_tag | layout.one_byte_string_tag,
            "string_length_at": layout.string_length,
            "string_chars_at": layout.seq_string_chars,
            "sliced_parent_at": layout.sliced_parent,
            "sliced_offset_at": layout.sliced_offset,
            "thin_one_byte_tag": layout.thin_string_tag | layout.one_byte_string_tag,
            "thin_actual_at": layout.thin_actual,
            # The kernel reads a ConsString's halves in one read: side by side.
            "cons_one_byte_tag": layout.cons_string_tag | layout.one_byte_string_tag
            if layout.cons_second == layout.cons_first + 8
            else 0,
            "cons_first_at": layout.cons_first,
            "heap_number_type": layout.objects.heap_number_type,
        }
        process = _Process(
            pid, layout, base, memory, MemoryThread(memory), Properties(HeapReader(memory, layout), layout.objects)
        )
        if not self._tell_kernel(process):
            process.thread.close()
            memory.close()
            return False
        with self._lock:
            self._processes[pid] = process
        return True

    def _refuse(self, pid: int, why: str) -> None:
        with self._lock:
            if len(self._refused) < MAX_PROCESSES:
                self._refused[pid] = why

    def forget(self, pid: int) -> None:
        with self._lock:
            process = self._processes.pop(pid, None)
            self._refused.pop(pid, None)
        if process is not None:
            process.thread.close()
            process.memory.close()
        clear = getattr(self._kernel, "clear_v8_context", None)
        if clear is not None:
            clear(pid)

    def labels(self, pid: int, data: bytes) -> tuple[tuple[tuple[str, str], ...], bool]:
        """The labels of a sample whose record the kernel read, and whether
        they are final (a span without its route yet is read again on its
        next samples, a record that stopped short until what it lacked is
        learned)."""
        record = decode_record(data)
        with self._lock:
            process = self._processes.get(pid)
        if record is None or process is None:
            return (), True
        stored = self._store_labels(process, record)
        process.reached[record.reached] = process.reached.get(record.reached, 0) + 1
        if record.reached != REACHED_IDS:
            final = (
                record.reached == REACHED_CONTEXT
                and process.learned.span_key != 0
                or (record.reached == REACHED_FRAME and process.learned.store_key != 0)
            )
            return stored, final and (not self._label_store or record.store_map == 0 or bool(stored))
        ids = (("trace_id", record.trace_id), ("span_id", record.span_id))
        route = (("http.route", record.route),) if record.route else ()
        named, final = self._span_labels(process, record)
        if record.span_name:
            # Read at the sample: a span moved before user space came to it keeps its name.
            named = (("span_name", record.span_name), *(label for label in named if label[0] != "span_name"))
        return stored + ids + route + named, final and not record.route_unknown

    def _store_labels(self, process: _Process, record: Record) -> tuple[tuple[str, str], ...]:
        names = process.learned.label_stores.get(record.store_map) if record.store_map else None
        if not names:
            return ()
        return tuple((name, value) for (name, _slot), value in zip(names, record.store_fields) if value is not None)

    # Learning ------------------------------------------------------------

    def note(self, pid: int, data: bytes) -> None:
        """(The sampling thread's call: it only queues.) A sample's record,
        as it comes up: the frame it found is learned from at once."""
        record = decode_record(data)
        with self._lock:
            process = self._processes.get(pid)
        if record is not None and process is not None:
            self._hint(process, record)

    def _hint(self, process: _Process, record: Record) -> None:
        from_map = record.reached == REACHED_SPAN or record.reached == REACHED_IDS and record.route_unknown
        if from_map:
            # A map not known, sent in place of the frame: each is looked at once.
            if record.frame in process.maps_tried or len(process.maps_tried) >= MAX_MAPS_TRIED:
                return
            process.maps_tried.add(record.frame)
        elif not self._worth_learning(process, record):
            return
        if not self._queue(process.pid, record.frame, HINT_MAP if from_map else HINT_FRAME) and from_map:
            process.maps_tried.discard(record.frame)

    def watch_soon(self, pid: int) -> None:
        """(The sampling thread's call: it only queues.) watch(pid) on the
        learner's thread: a process found by --all while the symbolizer is
        busy with its first samples has its context read from then on."""
        self._queue(pid, 0, HINT_WATCH)

    def _queue(self, pid: int, address: int, kind: int) -> bool:
        if self._learner is None:
            with self._lock:
                if self._learner is None:
                    # A small stack: a run's address space is capped (a thread's
                    # default stack is 8 MiB), and this one parses and reads only.
                    previous = threading.stack_size(LEARNER_STACK_BYTES)
                    learner = threading.Thread(target=self._learn_loop, name="jitprof-node-context", daemon=True)
                    try:
                        learner.start()
                    except RuntimeError:  # no thread can start (ulimit -v): no node labels, the run goes on
                        return False
                    finally:
                        threading.stack_size(previous)
                    self._learner = learner
        try:
            self._hints.put_nowait((pid, address, kind))
        except queue.Full:
            return False
        return True

    def _learn_loop(self) -> None:
        while True:
            pid, address, kind = self._hints.get()
            if kind == HINT_WATCH:
                self.watch(pid)
                continue
            with self._lock:
                process = self._processes.get(pid)
            if process is None:
                continue
            if kind == HINT_MAP:
                self._learn_map(process, address)
            else:
                self._learn(process, address)

    def _worth_learning(self, process: _Process, record: Record) -> bool:
        learned = process.learned
        store_unknown = bool(self._label_store) and (
            learned.label_store_key == 0 or record.store_map != 0 and record.store_map not in learned.label_stores
        )
        if record.reached >= REACHED_SPAN or record.reached == REACHED_CONTEXT and learned.span_key != 0:
            if not store_unknown:
                return False  # all read, a context with no active span, or a map to learn from
        now = time.monotonic()
        if now - process.learned_at < LEARN_EVERY_S or process.learns >= MAX_LEARNS:
            return False
        process.learned_at = now
        process.learns += 1
        return True

    def _learn(self, process: _Process, frame: int) -> None:
        # A copy, swapped in whole: the symbolizer's thread reads what is learned.
        learned = copy.deepcopy(process.learned)
        process.thread.run(lambda: _learn_from_frame(process.properties, learned, frame, self._label_store))
        taught = learned.key() != process.learned.key()
        process.fruitless = 0 if taught else process.fruitless + 1
        waking = not self._complete(learned) and process.fruitless < MAX_FRUITLESS_WAKES and process.learns < MAX_LEARNS
        if taught or waking != process.waking:
            process.learned = learned
            process.waking = waking
            self._tell_kernel(process)

    def _learn_map(self, process: _Process, map_word: int) -> None:
        learned = copy.deepcopy(process.learned)
        process.thread.run(lambda: _learn_from_map(process.properties, learned, map_word))
        if learned.key() != process.learned.key():
            process.learned = learned
            self._tell_kernel(process)

    def _complete(self, learned: _Learned) -> bool:
        return (
            learned.store_key != 0
            and learned.span_key != 0
            and bool(learned.spans)
            and bool(learned.span_contexts)
            and bool(learned.attributes)
            and (not self._label_store or bool(learned.label_stores))
        )

    def _tell_kernel(self, process: _Process) -> bool:
        learned = process.learned
        config = dict(process.base)
        config["store_key"] = learned.store_key
        config["span_key"] = learned.span_key
        config["context_maps"] = list(learned.contexts)
        config["context_map_at"] = list(learned.contexts.values())
        config["span_maps"] = list(learned.spans)
        config["span_context_at"] = [slots[0] for slots in learned.spans.values()]
        config["attributes_at"] = [slots[1] for slots in learned.spans.values()]
        config["span_name_at"] = [slots[2] for slots in learned.spans.values()]
        config["attributes_maps"] = list(learned.attributes)
        config["route_at"] = list(learned.attributes.values())
        config["span_context_maps"] = list(learned.span_contexts)
        config["trace_id_at"] = [slots[0] for slots in learned.span_contexts.values()]
        config["span_id_at"] = [slots[1] for slots in learned.span_contexts.values()]
        config["learning"] = int(process.waking)
        config["label_store_key"] = learned.label_store_key
        config["label_store_maps"] = list(learned.label_stores)
        config["label_store_at"] = [[slot for _name, slot in fields] for fields in learned.label_stores.values()]
        setter = getattr(self._kernel, "set_v8_context", None)
        return bool(setter(process.pid, config)) if setter is not None else False

    # Naming a span -------------------------------------------------------

    def _span_labels(self, process: _Process, record: Record) -> tuple[tuple[tuple[str, str], ...], bool]:
        """The span's name and method, read from it while it is at the
        address the sample found (once per span; a span already moved is
        tried again on its next samples, SPAN_READS times in all)."""
        known = process.spans.get(record.span_id)
        if known is not None and (known[1] >= SPAN_READS or known[0]):
            return known[0], True
        found = process.thread.run(lambda: _read_span(process.properties, record.object, record.span_id))
        reads = (known[1] if known is not None else 0) + 1
        if len(process.spans) >= MAX_SPANS:
            process.spans.clear()
        process.spans[record.span_id] = (found or (), SPAN_READS if found is not None else reads)
        return found or (), found is not None or reads >= SPAN_READS

    def warnings(self) -> list[str]:
        """End-of-run notes: node processes whose AsyncLocalStorage was not read, and why."""

        with self._lock:
            refused = list(self._refused.items())
            unseen = [
                pid
                for pid, process in self._processes.items()
                if not process.reached and process.layout.version < FRAMES_BY_DEFAULT
            ]
        notes = [
            f"jitprof: note: node process {pid} ({why}): its AsyncLocalStorage (the OpenTelemetry JS SDK's span) "
            "is not read; its samples carry no request labels"
            for pid, why in refused[:MAX_NOTED]
        ]
        notes += [
            f"jitprof: note: node process {pid} ran no AsyncLocalStorage in V8's async context frames: node 22 keeps "
            "them there only with --experimental-async-context-frame (node 24 on, always); without it, no request labels"
            for pid in unseen[:MAX_NOTED]
        ]
        return notes


def _remember_frames(path: str, has_frames: bool) -> None:
    """For the next run's start: does this executable's V8 keep async context frames?"""
    try:
        context_reader_memo.remember(os.stat(path), has_frames)
    except OSError:
        pass


def _learn_from_frame(properties: Properties, learned: _Learned, frame: int, label_store: str = "") -> None:
    """Find the OpenTelemetry context manager's store in a frame, and what
    the kernel needs to read down to its span's ids; and the store that
    has the field label_store, with the fields the kernel reads of it."""
    for key, value in properties.entries(frame, FRAME_ENTRIES) or []:
        store_map = properties.map_of(value)
        fields = properties.fields(store_map) if store_map is not None else None
        if store_map is None or not fields:
            continue
        if label_store and label_store in fields:
            learned.label_store_key = key
            chosen = [label_store] + [name for name in fields if name != label_store and not name.startswith("Symbol(")]
            read = tuple((name[:MAX_STORE_KEY], fields[name].slot) for name in chosen[:STORE_FIELDS])
            _remember(learned.label_stores, store_map, read)
        slot = fields.get(CONTEXT_FIELD)
        context = properties.slot(value, slot) if slot is not None else None
        if slot is None or context is None or not properties.is_js_map(context):
            continue
        learned.store_key = key
        _remember(learned.contexts, store_map, slot.slot)
        for context_key, span in properties.entries(context, FRAME_ENTRIES) or []:
            if context_key != learned.span_key and properties.key_name(context_key) != SPAN_KEY:
                continue
            learned.span_key = context_key
            _learn_span(properties, learned, span)


def _learn_span(properties: Properties, learned: _Learned, span: int) -> None:
    span_map = properties.map_of(span)
    fields = properties.fields(span_map) if span_map is not None else None
    slot = fields.get(SPAN_CONTEXT_FIELD) if fields else None
    if span_map is None or slot is None or fields is None:
        return
    span_context = properties.slot(span, slot)
    context_map = properties.map_of(span_context) if span_context is not None else None
    context_fields = properties.fields(context_map) if context_map is not None else None
    if context_map is None or not context_fields:
        return
    trace, span_id = context_fields.get(TRACE_ID_FIELD), context_fields.get(SPAN_ID_FIELD)
    if trace is None or span_id is None:
        return
    attributes_slot = fields.get(ATTRIBUTES_FIELD)
    _remember(learned.spans, span_map, _span_slots(slot.slot, fields))
    _remember(learned.span_contexts, context_map, (trace.slot, span_id.slot))
    attributes = properties.slot(span, attributes_slot) if attributes_slot is not None else None
    attributes_map = properties.map_of(attributes) if attributes is not None else None
    attribute_fields = properties.fields(attributes_map) if attributes_map is not None else None
    route = attribute_fields.get(ROUTE_ATTRIBUTE) if attribute_fields is not None else None
    if attributes_map is not None and route is not None:
        # Only maps with a route: a span's attributes pass through several
        # as they are set, and those the samples of its handlers see have it.
        _remember(learned.attributes, attributes_map, route.slot)


def _learn_from_map(properties: Properties, learned: _Learned, map_word: int) -> None:
    """Learn a map the kernel did not know past the context: a span's, a
    span context's or a span's attributes' (with a route), told by its fields."""
    fields = properties.fields(map_word)
    if not fields:
        return
    span_context = fields.get(SPAN_CONTEXT_FIELD)
    trace, span_id, route = fields.get(TRACE_ID_FIELD), fields.get(SPAN_ID_FIELD), fields.get(ROUTE_ATTRIBUTE)
    if span_context is not None:
        _remember(learned.spans, map_word, _span_slots(span_context.slot, fields))
    elif trace is not None and span_id is not None:
        _remember(learned.span_contexts, map_word, (trace.slot, span_id.slot))
    elif route is not None:
        _remember(learned.attributes, map_word, route.slot)


def _span_slots(span_context_slot: int, fields: dict) -> tuple[int, int, int]:
    """What the kernel is told of a span's map: the slots of its span
    context, its attributes and its name (0: it has none)."""
    attributes, name = fields.get(ATTRIBUTES_FIELD), fields.get(NAME_FIELD)
    return span_context_slot, attributes.slot if attributes is not None else 0, name.slot if name is not None else 0


def _remember(known: dict, map_word: int, slots: object) -> None:
    """A map's slots, among MAPS_KNOWN: the newest replaces the oldest."""
    if map_word in known:
        known[map_word] = slots
        return
    if len(known) >= MAPS_KNOWN:
        known.pop(next(iter(known)))
    known[map_word] = slots


def _read_span(properties: Properties, span: int, span_id: str) -> tuple[tuple[str, str], ...] | None:
    """A span's name and attributes, if the object at span is still the span
    with span_id (None: it moved or is another)."""
    reader = properties.reader
    span_context = properties.get(span, SPAN_CONTEXT_FIELD)
    held = properties.get(span_context, SPAN_ID_FIELD) if span_context is not None else None
    if held is None or reader.string(held, 64) != span_id:
        return None
    found: list[tuple[str, str]] = []
    name = properties.get(span, NAME_FIELD)
    text = reader.string(name, MAX_TEXT) if name is not None else None
    if text:
        found.append(("span_name", text))
    attributes = properties.get(span, "attributes")
    attribute_map = properties.map_of(attributes) if attributes is not None else None
    fields = properties.fields(attribute_map) if attribute_map is not None else None
    seen: set[str] = set()
    for attribute, label in SPAN_ATTRIBUTES.items():
        slot = fields.get(attribute) if fields else None
        if slot is None or label in seen or attributes is None:
            continue
        value = properties.slot(attributes, slot)
        text = reader.string(value, MAX_TEXT) if value is not None else None
        if text:
            found.append((label, text))
            seen.add(label)
    # The span must still be the same after the reads: a collection that
    # moved it between them leaves another object at the address.
    if span_context is None or properties.get(span, SPAN_CONTEXT_FIELD) != span_context:
        return None
    held = properties.get(span_context, SPAN_ID_FIELD)
    if held is None or reader.string(held, 64) != span_id:
        return None
    return tuple(found)
