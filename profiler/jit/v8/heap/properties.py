"""JS objects' named properties, JSMaps' entries and Symbols' descriptions,
as read from a live process: what AsyncLocalStorage's stores are learned
and named from. A property is found by its Map's descriptors (the hidden
class): fast properties only; an object in dictionary mode has none here.
Every count is capped and every word checked, as in objects.py."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from profiler.jit.v8.heap.layout import POINTER, ObjectLayout
from profiler.jit.v8.heap.objects import HEAP_OBJECT_TAG, HeapReader, is_heap_object, is_smi, smi_value

MAX_DESCRIPTORS = 256  # of one map looked at
MAX_TABLE_ENTRIES = 64  # of a JSMap looked at
MAX_BUCKETS = 1 << 16
MAX_KEY_CHARS = 128
JS_MAP_TABLE = 3 * POINTER  # a JSCollection: map, properties, elements, then its table
TABLE_HEADER_WORDS = 3  # an OrderedHashMap's elements, deleted and buckets, then the buckets
TABLE_ENTRY_WORDS = 3  # key, value, chain
OUT_OF_OBJECT = 0x8000  # a slot in the properties array (the kernel's V8_OUT_OF_OBJECT)
_U32 = struct.Struct("<I")


@dataclass(frozen=True)
class Field:
    """Where a map's objects keep a property: a byte offset in the object,
    or OUT_OF_OBJECT | the index in its properties array."""

    slot: int


class Properties:
    def __init__(self, reader: HeapReader, objects: ObjectLayout) -> None:
        self.reader = reader
        self.objects = objects
        self._fields: dict[int, dict[str, Field] | None] = {}  # by map

    def map_of(self, tagged: int) -> int | None:
        if not is_heap_object(tagged):
            return None
        word = self.reader.memory.word(tagged - HEAP_OBJECT_TAG)
        return word if word is not None and is_heap_object(word) else None

    def fields(self, map_word: int) -> dict[str, Field] | None:
        """The data fields a map's objects have, by name (a Symbol's as
        `Symbol(description)`); None for a dictionary-mode map or one that
        does not read as a map. Remembered per map: a map never changes
        the fields it has."""
        if map_word in self._fields:
            return self._fields[map_word]
        found = self._read_fields(map_word)
        if len(self._fields) >= 4096:
            self._fields.clear()
        self._fields[map_word] = found
        return found

    def _read_fields(self, map_word: int) -> dict[str, Field] | None:
        objects, memory = self.objects, self.reader.memory
        base = map_word - HEAP_OBJECT_TAG
        head = memory.read(base + objects.map_instance_size_words, 2)
        bits = memory.read(base + objects.map_bit_field3, 4)
        descriptors = memory.word(base + objects.map_descriptors)
        if head is None or bits is None or descriptors is None or not is_heap_object(descriptors):
            return None
        size_words, inobject_start = head[0], head[1]
        bit_field3 = _U32.unpack(bits)[0]
        if bit_field3 & objects.dictionary_map_bit or inobject_start > size_words:
            return None
        count = (bit_field3 & objects.own_descriptors_mask) >> objects.own_descriptors_shift
        if count > MAX_DESCRIPTORS:
            return None
        inobject = size_words - inobject_start
        words = objects.descriptor_words
        data = memory.read(descriptors - HEAP_OBJECT_TAG + objects.descriptors_header, count * words * POINTER) if count else b""
        if data is None:
            return None
        found: dict[str, Field] = {}
        for index in range(count):
            key, details = (
                struct.unpack_from("<Q", data, (index * words + objects.descriptor_key) * POINTER)[0],
                struct.unpack_from("<Q", data, (index * words + objects.descriptor_details) * POINTER)[0],
            )
            if not is_smi(details):
                return None
            bits_of = smi_value(details)
            if bits_of & objects.location_mask != objects.location_field:
                continue  # a constant kept in the descriptor (a method), not a field
            field_index = (bits_of & objects.index_mask) >> objects.index_shift
            name = self.key_name(key)
            if name is None:
                continue
            if field_index < inobject:
                found[name] = Field((inobject_start + field_index) * POINTER)
            elif field_index - inobject < OUT_OF_OBJECT:
                found[name] = Field(OUT_OF_OBJECT | (field_index - inobject))
        return found

    def key_name(self, key: int) -> str | None:
        if self.reader.instance_type(key) == self.objects.symbol_type:
            description = self.reader.field(key, self.objects.symbol_description)
            text = self.reader.string(description, MAX_KEY_CHARS) if description is not None else None
            return f"Symbol({text})" if text is not None else None
        return self.reader.string(key, MAX_KEY_CHARS)

    def slot(self, tagged: int, field: Field) -> int | None:
        """The word in a field of an object (of the map the field is from)."""
        if not field.slot & OUT_OF_OBJECT:
            return self.reader.field(tagged, field.slot)
        properties = self.reader.field(tagged, self.objects.properties)
        if properties is None or not is_heap_object(properties):
            return None
        return self.reader.field(properties, self.reader.layout.array_data + (field.slot & ~OUT_OF_OBJECT) * POINTER)

    def get(self, tagged: int, name: str) -> int | None:
        """An object's own data property by name (fast properties only)."""
        map_word = self.map_of(tagged)
        fields = self.fields(map_word) if map_word is not None else None
        field = fields.get(name) if fields is not None else None
        return self.slot(tagged, field) if field is not None else None

    def is_js_map(self, tagged: int) -> bool:
        return self.reader.instance_type(tagged) == self.objects.js_map_type

    def entries(self, js_map: int, limit: int = MAX_TABLE_ENTRIES) -> list[tuple[int, int]] | None:
        """A JSMap's (key, value) pairs, in insertion order; None if it is not one."""
        if not self.is_js_map(js_map):
            return None
        table = self.reader.field(js_map, JS_MAP_TABLE)
        if table is None or not is_heap_object(table):
            return None
        start = table - HEAP_OBJECT_TAG + self.reader.layout.array_data
        header = self.reader.memory.read(start, TABLE_HEADER_WORDS * POINTER)
        if header is None:
            return None
        elements, deleted, buckets = (word for (word,) in struct.iter_unpack("<Q", header))
        if not (is_smi(elements) and is_smi(deleted) and is_smi(buckets)):
            return None
        used = smi_value(elements) + smi_value(deleted)
        if not 0 <= used <= limit or not 0 <= smi_value(buckets) <= MAX_BUCKETS:
            return None
        first = start + (TABLE_HEADER_WORDS + smi_value(buckets)) * POINTER
        data = self.reader.memory.read(first, used * TABLE_ENTRY_WORDS * POINTER) if used else b""
        if data is None:
            return None
        words = [word for (word,) in struct.iter_unpack("<Q", data)]
        # A deleted entry keeps the hole as its key: it matches no key a caller looks for.
        return [(words[index * TABLE_ENTRY_WORDS], words[index * TABLE_ENTRY_WORDS + 1]) for index in range(used)]
