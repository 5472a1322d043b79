"""What the kernel is told to read a node sample's async callers: the
isolate's current microtask (from V8's own accessor), the builtins' ids
(from V8's builtin table) and the objects' fields."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from profiler.jit.v8.heap import async_chain
from profiler.jit.v8.heap.isolate import IsolateError, IsolateLocations, loaded_field
from profiler.jit.v8.heap.layout import layout_of_file
from profiler.native import elf_format
from tests.jit.v8.test_heap import NODES

T = TypeVar("T")

# V8 12.4's FactoryBase<Factory>::current_microtask(): the root (0x1cb0) into
# r12, the handle scope's next (0x200) into rax, compared with its limit (0x208) as `cmp %rax, 0x208(%rdi)`.
CURRENT_MICROTASK_V8_12 = bytes.fromhex("554889e541544883ec184c8ba7b01c0000488b8700020000483987080200007417")
# V8 14's: the root (0x2640) into rcx, then the limit compared the other way round.
CURRENT_MICROTASK_V8_14 = bytes.fromhex("554889e5488b8f40260000488b8730020000483b87380200007410")


def read_symbol(binary: Path, prefix: str, matches: Callable[[str], bool], read: Callable[..., T]) -> T:
    """read(handle, header, sections, symbol) of the one symbol of the
    binary whose name begins with prefix and matches."""
    with binary.open("rb") as handle:
        header = elf_format.read_header(handle)
        sections = elf_format.section_headers(handle, header)
        (symbol,) = [symbol for symbol in elf_format.symbols_named(handle, (prefix.encode(),), 4096) if matches(symbol.name)]
        return read(handle, header, sections, symbol)


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
    every = read_symbol(
        NODES[major],
        async_chain.BUILTIN_METADATA_PREFIX,
        lambda name: name.endswith(async_chain.BUILTIN_METADATA_SUFFIX),
        async_chain.builtin_ids,
    )
    # An await's fulfill closure comes right after its reject closure in V8's list.
    assert every["AsyncFunctionAwaitResolveClosure"] == every["AsyncFunctionAwaitRejectClosure"] + 1


# V8 11.3's Builtins_RunMicrotasks (node 20), its first stores: the task
# into the root (0x1ae0 from the root register), the context; then undefined
# into the root again when the queue is done.
RUN_MICROTASKS_V8_11 = bytes.fromhex(
    "4d899de01a0000"  # mov %r11, 0x1ae0(%r13)
    "4d89bd98000000"  # mov %r15, 0x98(%r13)
    "498b8590010000"  # mov 0x190(%r13), %rax
    "498985e01a0000"  # mov %rax, 0x1ae0(%r13)
)


def test_node_20s_microtask_is_the_root_its_runner_stores_it_in():
    assert async_chain.stored_root(RUN_MICROTASKS_V8_11) == 0x1AE0
    # Stored once only, or never: not the code jitprof knows.
    with pytest.raises(IsolateError, match="RunMicrotasks"):
        async_chain.stored_root(RUN_MICROTASKS_V8_11[:14])
    with pytest.raises(IsolateError, match="RunMicrotasks"):
        async_chain.stored_root(bytes.fromhex("554889e5c3"))


def test_node_20_has_its_chain_with_the_embedder_data_last():
    if not NODES["20"].exists():
        pytest.skip("Node.js 20 is not installed")
    layout = layout_of_file(str(NODES["20"]))
    chain = layout.async_callers
    assert isinstance(chain, async_chain.AsyncChain), chain
    assert not chain.leading_data and 0 < chain.microtask_at < 1 << 16
    config = layout.async_config()
    assert isinstance(config, dict)
    assert (config["task_handler_at"], config["task_promise_at"]) == (24, 32)
    assert (config["reaction_next_at"], config["reaction_fulfill_at"], config["reaction_promise_at"]) == (8, 24, 32)


@pytest.mark.parametrize("major", ["22", "24", "26"])
def test_the_runners_root_is_the_one_the_accessor_loads(major):
    """Where both exist, the builtin's store and V8's accessor agree: the
    root register sits ISOLATE_ROOT_BIAS into the Isolate."""
    if not NODES[major].exists():
        pytest.skip(f"Node.js {major} is not installed (make setup installs it)")
    code = read_symbol(
        NODES[major],
        async_chain.RUN_MICROTASKS,
        lambda name: name == async_chain.RUN_MICROTASKS,
        lambda handle, header, sections, runner: elf_format.symbol_prefix(
            handle, runner, sections, header, async_chain.RUN_MICROTASKS_BYTES
        ),
    )
    layout = layout_of_file(str(NODES[major]))
    assert isinstance(layout.async_callers, async_chain.AsyncChain) and code is not None
    assert async_chain.stored_root(code) + async_chain.ISOLATE_ROOT_BIAS == layout.async_callers.microtask_at


def test_a_v8_between_the_two_layouts_is_refused():
    with pytest.raises(async_chain.AsyncChainError, match="V8 12.0"):
        async_chain.read_chain(None, None, [], [], (12, 0))  # type: ignore[arg-type]


def test_the_kernels_offsets_follow_the_context_slots():
    chain = async_chain.AsyncChain(-0xA0, 0x2580, ((258, async_chain.ROLE_AWAIT), (1382, async_chain.ROLE_ALL)))
    types = async_chain.ObjectTypes((2065, 2081), 132, 133, 2115, 162, 2110, 2111, 146, 161)
    config = async_chain.kernel_config(chain, types, 12, 32, 40, 16, 2)
    assert config["builtin_ids"] == (258, 1382) and config["builtin_roles"] == (1, 3)
    assert config["combinator_capability_at"] == 16 + 3 * 8  # the slot after "remaining"
    assert config["resolve_promise_at"] == 16 + 2 * 8
    assert config["isolate_tls"] == -0xA0 and config["function_types"] == (2065, 2081)
