"""Where each node binary keeps a thread's isolate and its async context
frame: from its TLS segment and V8's own accessor's first instructions."""

from __future__ import annotations

import pytest

from profiler.jit.v8.heap.isolate import IsolateError, IsolateLocations, embedder_data_offset, static_tls_offset
from profiler.jit.v8.heap.layout import layout_of_file
from profiler.native import elf_format
from tests.jit.v8.test_heap import NODES

# V8 14.6's GetContinuationPreservedEmbedderData(): the handle scope's next
# (0x230) into rax, the embedder data (0x2a8) into rcx, rax against the limit (0x238).
ACCESSOR_V8_14 = bytes.fromhex("554889e5488b8730020000488b8fa8020000483b87380200007410")
# V8 12.4's: the embedder data (0x240) into r12 first.
ACCESSOR_V8_12 = bytes.fromhex("554889e541544883ec184c8ba740020000488b8700020000483b8708020000")


def test_the_embedder_data_is_the_field_loaded_besides_the_handle_scope():
    assert embedder_data_offset(ACCESSOR_V8_14) == 0x2A8
    assert embedder_data_offset(ACCESSOR_V8_12) == 0x240


def test_an_accessor_of_other_code_is_refused():
    with pytest.raises(IsolateError):
        embedder_data_offset(bytes.fromhex("554889e5c3"))
    with pytest.raises(IsolateError):  # two candidates: which one is not known
        embedder_data_offset(ACCESSOR_V8_14 + bytes.fromhex("488b8f10010000"))


def test_the_executables_tls_block_ends_at_the_thread_pointer():
    # node 24: a 0x1a8-byte block aligned to 8; the variable 0x108 into it.
    assert static_tls_offset(0x108, 0x6B525D8, 0x1A8, 8) == -0xA0
    # a block whose start is not aligned keeps its first byte's offset
    assert static_tls_offset(0x10, 0x1004, 0x30, 16) == 0x10 - 0x34


@pytest.mark.parametrize("major", ["22", "24", "26"])
def test_each_node_with_async_context_frames_has_its_locations(major):
    if not NODES[major].exists():
        pytest.skip(f"Node.js {major} is not installed (make setup installs it)")
    locations = layout_of_file(str(NODES[major])).async_context
    assert isinstance(locations, IsolateLocations), locations
    with NODES[major].open("rb") as handle:
        _vaddr, size, _align = elf_format.tls_segment(handle, elf_format.read_header(handle))
    assert -size <= locations.isolate_tls < 0
    assert 0 < locations.embedder_data < 4096 and locations.embedder_data % 8 == 0


def test_node_20_has_no_embedder_data_and_says_so():
    if not NODES["20"].exists():
        pytest.skip("Node.js 20 is not installed")
    refused = layout_of_file(str(NODES["20"])).async_context
    assert isinstance(refused, IsolateError) and "no continuation-preserved embedder data" in str(refused)
