"""What the kernel is told to read a node sample's async callers: the
isolate's current microtask (from V8's own accessor), the builtins' ids
(from V8's builtin table) and the objects' fields."""

from __future__ import annotations

import pytest

from profiler.jit.v8.heap import async_chain
from profiler.jit.v8.heap.isolate import IsolateError, IsolateLocations, loaded_field
from profiler.jit.v8.heap.layout import layout_of_file
from profiler.native import elf_format
from tests.jit.v8.test_heap import NODES

# V8 12.4's FactoryBase<Factory>::current_microtask(): the root (0x1cb0) into
# r12, the handle scope's next (0x200) into rax, compared with its limit (0x208) as `cmp %rax, 0x208(%rdi)`.
CURRENT_MICROTASK_V8_12 = bytes.fromhex("554889e541544883ec184c8ba7b01c0000488b8700020000483987080200007417")
# V8 14's: the root (0x2640) into rcx, then the limit compared the other way round.
CURRENT_MICROTASK_V8_14 = bytes.fromhex("554889e5488b8f40260000488b8730020000483b87380200007410")


def test_the_current_microtask_is_the_field_its_accessor_loads():
    assert loaded_field(CURRENT_MICROTASK_V8_12, "current_microtask()") == 0x1CB0
    assert loaded_field(CURRENT_MICROTASK_V8_14, "current_microtask()") == 0x2640
    with pytest.raises(IsolateError, match="current_microtask"):
        loaded_field(bytes.fromhex("554889e5c3"), "current_microtask()")


@pytest.mark.parametrize("major", ["22", "24", "26"])
def test_each_node_from_22_has_its_chain(major):
    if not NODES[major].exists():
        pytest.skip(f"Node.js {major} is not installed (make setup installs it)")
    layout = layout_of_file(str(NODES[major]))
    chain = layout.async_callers
    assert isinstance(chain, async_chain.AsyncChain), chain
    assert isinstance(layout.async_context, IsolateLocations) and chain.isolate_tls == layout.async_context.isolate_tls
    assert 0 < chain.microtask_at < 1 << 16 and chain.microtask_at % 8 == 0
    roles = {role for _builtin, role in chain.builtins}
    assert roles == set(range(async_chain.ROLE_AWAIT, async_chain.ROLE_DEFAULT_RESOLVE + 1))
    ids = [builtin for builtin, _role in chain.builtins]
    assert len(set(ids)) == len(ids) and all(0 < builtin < 4096 for builtin in ids)
    config = layout.async_config()
    assert isinstance(config, dict)
    assert config["builtin_ids"] == tuple(ids) and config["microtask_at"] == chain.microtask_at
    # The await's closure keeps its generator in its context's extension slot.
    assert config["context_extension_at"] == 32 and config["function_context_at"] == 40
    with NODES[major].open("rb") as handle:
        header = elf_format.read_header(handle)
        sections = elf_format.section_headers(handle, header)
        (metadata,) = [
            symbol
            for symbol in elf_format.symbols_named(handle, (async_chain.BUILTIN_METADATA_PREFIX.encode(),), 4096)
            if symbol.name.endswith(async_chain.BUILTIN_METADATA_SUFFIX)
        ]
        every = async_chain.builtin_ids(handle, header, sections, metadata)
    # An await's fulfill closure comes right after its reject closure in V8's list.
    assert every["AsyncFunctionAwaitResolveClosure"] == every["AsyncFunctionAwaitRejectClosure"] + 1


def test_node_20_says_why_it_has_no_chain():
    if not NODES["20"].exists():
        pytest.skip("Node.js 20 is not installed")
    reason = layout_of_file(str(NODES["20"])).async_config()
    assert isinstance(reason, str) and "from V8 12.4 (node 22) on" in reason


def test_the_kernels_offsets_follow_the_context_slots():
    chain = async_chain.AsyncChain(-0xA0, 0x2580, ((258, async_chain.ROLE_AWAIT), (1382, async_chain.ROLE_ALL)))
    types = async_chain.ObjectTypes((2065, 2081), 132, 133, 2115, 162, 2110, 2111, 146, 161)
    config = async_chain.kernel_config(chain, types, 12, 32, 40, 16, 2)
    assert config["builtin_ids"] == (258, 1382) and config["builtin_roles"] == (1, 3)
    assert config["combinator_capability_at"] == 16 + 3 * 8  # the slot after "remaining"
    assert config["resolve_promise_at"] == 16 + 2 * 8
    assert config["isolate_tls"] == -0xA0 and config["function_types"] == (2065, 2081)
