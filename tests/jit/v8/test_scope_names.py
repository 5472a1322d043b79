"""A function's name from its ScopeInfo, read from another process's memory
that ends where a small ScopeInfo does (the end of a mapped page): the read
of the slots past it fails, and the name must still be read from those the
page holds, not come out empty (every frame of that function would be
`(anonymous)` for the rest of the run)."""

from __future__ import annotations

import struct

import pytest

from profiler.jit.v8.heap.layout import layout_of_file
from profiler.jit.v8.heap.objects import HEAP_OBJECT_TAG, PAGE_BYTES, HeapReader
from tests.jit.v8.test_heap import NODES

MAPPED_END = 0x200000  # the memory below is mapped, the page from here is not


class PageEndMemory:
    """A process's memory: these bytes, then nothing mapped past MAPPED_END."""

    def __init__(self) -> None:
        self.bytes = bytearray(MAPPED_END)

    def read(self, address: int, length: int) -> bytes | None:
        if address < 0 or address + length > MAPPED_END:
            return None
        return bytes(self.bytes[address : address + length])

    def word(self, address: int) -> int | None:
        data = self.read(address, 8)
        return struct.unpack("<Q", data)[0] if data is not None else None

    def put(self, address: int, *words: int) -> None:
        for index, word in enumerate(words):
            struct.pack_into("<Q", self.bytes, address + 8 * index, word)


def smi(value: int) -> int:
    return value << 32


@pytest.mark.parametrize("major", ["24", "26"])
def test_a_scope_info_that_ends_a_mapped_page_still_names_its_function(major):
    if not NODES[major].exists():
        pytest.skip(f"Node.js {major} is not installed (make setup installs it)")
    layout = layout_of_file(str(NODES[major]))
    memory = PageEndMemory()
    # Maps: a ScopeInfo's and a one-byte internalized string's.
    scope_map, string_map = 0x10000, 0x10100  # (objects lie above the first 64 KiB)
    struct.pack_into("<H", memory.bytes, scope_map + layout.map_instance_type, layout.type_scope_info)
    string_type = layout.one_byte_string_tag | 0x0  # sequential, one-byte (internalized: the bit V8 clears)
    struct.pack_into("<H", memory.bytes, string_map + layout.map_instance_type, string_type)
    name = 0x20000
    memory.put(name, string_map + HEAP_OBJECT_TAG)
    struct.pack_into("<I", memory.bytes, name + layout.string_length, 1)
    memory.bytes[name + layout.seq_string_chars] = ord("a")
    # The ScopeInfo: map, flags (a raw word), parameters, context locals 0,
    # start 150 and end 200, then its name; it ends the mapped memory.
    slots = [0] * (layout.scope_info_first_vars + 2)
    slots[layout.scope_info_context_locals] = smi(0)
    slots[3], slots[4] = smi(150), smi(200)
    slots[layout.scope_info_first_vars] = name + HEAP_OBJECT_TAG
    slots[layout.scope_info_first_vars + 1] = smi(0)
    scope = MAPPED_END - 8 * (len(slots) + 1)
    assert MAPPED_END % PAGE_BYTES == 0
    memory.put(scope, scope_map + HEAP_OBJECT_TAG, *slots)
    reader = HeapReader(memory, layout)  # type: ignore[arg-type]
    assert reader._scope_name_and_start(scope + HEAP_OBJECT_TAG) == ("a", 150)
