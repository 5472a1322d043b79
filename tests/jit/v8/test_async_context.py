"""Node's AsyncLocalStorage as a label source, over a heap the test lays
out as V8 24's: learning the OpenTelemetry store, span key, maps and slots
the kernel reads by; decoding what the kernel sent; naming a span only
while it is the span the sample saw."""

from __future__ import annotations

import struct

from profiler.jit.v8 import async_context as node
from profiler.jit.v8.heap.objects import HeapReader
from profiler.jit.v8.heap.properties import OUT_OF_OBJECT, Properties
from tests.jit.v8.test_heap import Heap, node_layout

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
SPAN = "00f067aa0ba902b7"


class ObjectHeap(Heap):
    """Heap with JS objects whose maps have descriptors, JSMaps and Symbols."""

    def __init__(self, layout) -> None:  # noqa: ANN001
        super().__init__(layout)
        self.objects = layout.objects
        self.smi = lambda value: struct.pack("<Q", value << 32)

    def js_map_of(self, names: list[str], inobject: int) -> int:
        """A map whose objects have these fields: the first inobject in the object, the rest out of it."""
        objects = self.objects
        entries = bytearray()
        for index, name in enumerate(names):
            key = self.symbol(name[7:-1]) if name.startswith("Symbol(") else self.one_byte_string(name)
            details = index << objects.index_shift  # a field (location 0), data
            entries += struct.pack("<QQQ", key, details << 32, 0)
        descriptors = self.object(0, {objects.descriptors_header: bytes(entries)}, objects.descriptors_header + len(entries))
        body = bytearray(0x50)
        struct.pack_into("<Q", body, 0, self.map_of(0x44))
        start_words = 3
        body[objects.map_instance_size_words] = start_words + inobject
        body[objects.map_inobject_start] = start_words
        struct.pack_into("<H", body, self.layout.map_instance_type, 1057)
        struct.pack_into("<I", body, objects.map_bit_field3, len(names) << objects.own_descriptors_shift)
        struct.pack_into("<Q", body, objects.map_descriptors, descriptors)
        address = self.next
        self.next += 0x100
        self.memory.put(address, bytes(body))
        return address + 1

    def js_object(self, object_map: int, values: list[int], inobject: int) -> int:
        properties = (
            self.object(0x80, {16: b"".join(struct.pack("<Q", value) for value in values[inobject:])})
            if len(values) > inobject
            else 0
        )
        address = self.next
        self.next += 0x100
        body = bytearray(0x80)
        struct.pack_into("<QQ", body, 0, object_map, properties)
        for index, value in enumerate(values[:inobject]):
            struct.pack_into("<Q", body, 24 + 8 * index, value)
        self.memory.put(address, bytes(body))
        return address + 1

    def symbol(self, description: str) -> int:
        return self.object(
            self.objects.symbol_type, {self.objects.symbol_description: struct.pack("<Q", self.one_byte_string(description))}
        )

    def js_map(self, pairs: list[tuple[int, int]]) -> int:
        buckets = 2
        data = self.smi(len(pairs)) + self.smi(0) + self.smi(buckets) + bytes(8 * buckets)
        for key, value in pairs:
            data += struct.pack("<QQQ", key, value, 0)
        table = self.object(0x90, {16: data}, 16 + len(data))
        return self.object(self.objects.js_map_type, {24: struct.pack("<Q", table)})


def otel_frame(heap: ObjectHeap, span_id: str = SPAN):
    """An AsyncContextFrame holding another store, then the OpenTelemetry
    context manager's: a Context whose JSMap holds a span."""
    span_context_map = heap.js_map_of(["traceId", "spanId", "traceFlags"], inobject=4)
    span_context = heap.js_object(span_context_map, [heap.one_byte_string(TRACE), heap.one_byte_string(span_id), 1 << 32], 4)
    attributes_map = heap.js_map_of(["http.request.method", "url.path", "http.route"], inobject=1)
    attributes = heap.js_object(
        attributes_map, [heap.one_byte_string("GET"), heap.one_byte_string("/a"), heap.one_byte_string("/checkout")], 1
    )
    span_map = heap.js_map_of(["_spanContext", "kind", "attributes", "name"], inobject=2)
    span = heap.js_object(span_map, [span_context, 1 << 32, attributes, heap.one_byte_string("GET /checkout")], 2)
    span_key = heap.symbol("OpenTelemetry Context Key SPAN")
    other_key = heap.symbol("OpenTelemetry SDK Context Key RPC_METADATA")
    context_map = heap.js_map([(other_key, heap.one_byte_string("x")), (span_key, span)])
    context = heap.js_object(heap.js_map_of(["_currentContext", "getValue"], inobject=4), [context_map, 0], 4)
    tenant_store = heap.js_object(heap.js_map_of(["tenant"], inobject=4), [heap.one_byte_string("acme")], 4)
    store_key, tenant_key = heap.js_object(heap.js_map_of([], 0), [], 0), heap.js_object(heap.js_map_of([], 0), [], 0)
    frame = heap.js_map([(tenant_key, tenant_store), (store_key, context)])
    return frame, store_key, span_key, span, span_map, span_context_map, context


def properties_and_heap() -> tuple[Properties, ObjectHeap]:
    layout = node_layout("24")
    heap = ObjectHeap(layout)
    return Properties(HeapReader(heap.memory, layout), layout.objects), heap  # type: ignore[arg-type]


def test_fields_in_and_out_of_the_object_by_the_maps_descriptors():
    properties, heap = properties_and_heap()
    object_map = heap.js_map_of(["a", "b", "c"], inobject=2)
    thing = heap.js_object(object_map, [11 << 32, 22 << 32, 33 << 32], 2)
    fields = properties.fields(object_map)
    assert fields is not None and fields["a"].slot == 24 and fields["c"].slot == OUT_OF_OBJECT | 0
    assert [properties.get(thing, name) for name in "abc"] == [11 << 32, 22 << 32, 33 << 32]
    assert properties.get(thing, "d") is None


def test_learning_finds_the_store_the_span_key_and_where_ids_are():
    properties, heap = properties_and_heap()
    frame, store_key, span_key, span, span_map, span_context_map, context = otel_frame(heap)
    attributes_map = properties.map_of(properties.get(span, "attributes"))
    learned = node._Learned()
    node._learn_from_frame(properties, learned, frame)
    assert learned.store_key == store_key and learned.span_key == span_key
    assert learned.contexts == {properties.map_of(context): 24}
    # Its span context, its attributes and its name (both outside).
    assert learned.spans == {span_map: (24, OUT_OF_OBJECT | 0, OUT_OF_OBJECT | 1)}
    assert learned.span_contexts == {span_context_map: (24, 32)}
    assert learned.attributes == {attributes_map: OUT_OF_OBJECT | 1}  # http.route, the second outside


def test_a_frame_without_the_context_managers_store_teaches_nothing():
    properties, heap = properties_and_heap()
    tenant_store = heap.js_object(heap.js_map_of(["tenant"], inobject=4), [heap.one_byte_string("acme")], 4)
    frame = heap.js_map([(heap.symbol("k"), tenant_store)])
    learned = node._Learned()
    node._learn_from_frame(properties, learned, frame)
    assert learned == node._Learned()


def test_a_span_is_named_only_while_it_holds_the_sampled_span_id():
    properties, heap = properties_and_heap()
    _frame, _store, _key, span, *_rest = otel_frame(heap)
    named = node._read_span(properties, span, SPAN)
    assert named == (("span_name", "GET /checkout"), ("http.method", "GET"))
    # Another span (a collection moved the sampled one away): nothing.
    assert node._read_span(properties, span, "1111111111111111") is None


def test_records_decode_to_ids_route_and_store_fields():
    def record(
        reached: int, trace: str = TRACE, span: str = SPAN, route: bytes = b"/checkout", route_length: int = 9, name: bytes = b""
    ) -> bytes:
        fields = (
            node.FIELD_STRING,
            4,
            b"acme",
            node.FIELD_SMI,
            0,
            struct.pack("<i", -7),
            node.FIELD_DOUBLE,
            0,
            struct.pack("<d", 2.5),
        )
        ids = bytes.fromhex(trace), bytes.fromhex(span)
        return node.RECORD.pack(reached, route_length, len(name), 0x1001, 0x2001, *ids, 0x3001, *fields, route, name)

    whole = node.decode_record(record(node.REACHED_IDS))
    assert whole is not None and (whole.trace_id, whole.span_id, whole.object, whole.route) == (TRACE, SPAN, 0x2001, "/checkout")
    assert whole.store_map == 0x3001 and whole.store_fields == ("acme", "-7", "2.5")
    assert whole.span_name is None  # not read (a cons string, or its slot not known)
    assert node.decode_record(record(node.REACHED_IDS, name=b"GET /checkout")).span_name == "GET /checkout"
    assert node.decode_record(record(node.REACHED_IDS, trace="0" * 32)).reached == node.REACHED_SPAN
    # A route longer than the kernel reads keeps its first characters; an unknown map, none.
    long_route = node.decode_record(record(node.REACHED_IDS, route=b"/a" * 14, route_length=40))
    assert long_route.route == "/a" * 14
    unknown = node.decode_record(record(node.REACHED_IDS, route_length=node.ROUTE_UNKNOWN))
    assert unknown.route is None and unknown.route_unknown
    assert node.decode_record(record(node.REACHED_FRAME)[:40]) is None


def test_at_most_four_maps_per_object_the_newest_kept():
    known: dict[int, int] = {}
    for map_word in range(1, 7):
        node._remember(known, map_word, 24)
    assert list(known) == [3, 4, 5, 6]
