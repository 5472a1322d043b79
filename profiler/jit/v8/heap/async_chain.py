"""What the kernel needs to read a sample's async callers in a node binary
(bpf/v8_async.bpf.h): where the isolate keeps its current microtask, which
builtin ids the await, combinator and resolve closures have, and where the
promises, reactions and generators keep their fields. Read once per binary
with its layout (layout.py: the same pass over its symbols).

The current microtask's root is the field V8's own accessor
(FactoryBase<Factory>::current_microtask) loads; V8 11.3 (node 20) inlines
that accessor everywhere, and there it is the root V8's RunMicrotasks
builtin stores each task it runs in (and undefined after). The builtin ids
are the indexes of V8's builtin_metadata table, whose entries name them. The
objects' layouts are V8's Torque classes, the same from V8 11.3 (node 20) to
14 (node 26) but for the continuation-preserved embedder data, which V8 12
moved to the front of a task and of a reaction; the kernel checks instance
types at every step."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import BinaryIO

from profiler.jit.v8.heap import isolate
from profiler.native import elf_format
from profiler.native.elf import PARSE_ERRORS

CURRENT_MICROTASK = "_ZN2v88internal11FactoryBaseINS0_7FactoryEE17current_microtaskEv"
BUILTIN_METADATA_PREFIX = "_ZN2v88internal12_GLOBAL__N_1"
BUILTIN_METADATA_SUFFIX = "builtin_metadata" + "E"
SYMBOL_PREFIXES = (CURRENT_MICROTASK.encode(), BUILTIN_METADATA_PREFIX.encode())
METADATA_ENTRY_BYTES = 24  # struct BuiltinMetadata: name, kind, data
MAX_METADATA_BYTES = 1 << 17
NAMES_WINDOW_BYTES = 1 << 16  # of the builtins' names, read at once
MAX_NAME_BYTES = 64
MAX_NAME_READS = 256
MIN_VERSION = (12, 4)  # the accessor a symbol, the embedder data first in tasks and reactions
LEGACY_VERSION = (11, 3)  # node 20: the accessor inlined, the embedder data last
RUN_MICROTASKS = "Builtins_RunMicrotasks"
RUN_MICROTASKS_BYTES = 4096  # of the builtin decoded
ISOLATE_ROOT_BIAS = 0x80  # V8's root register points this far into the Isolate (kIsolateRootBias)
POINTER = 8

# struct v8_async_config.builtin_roles (bpf/jitprof_abi.h V8_ROLE_*).
ROLE_AWAIT, ROLE_AWAIT_REJECT, ROLE_ALL, ROLE_ALL_SETTLED, ROLE_ANY, ROLE_DEFAULT_RESOLVE = range(1, 7)
BUILTIN_ROLES = {
    # V8's IsBuiltinAsyncFulfillHandler and IsBuiltinAsyncRejectHandler.
    "AsyncFunctionAwaitResolveClosure": ROLE_AWAIT,
    "AsyncGeneratorAwaitResolveClosure": ROLE_AWAIT,
    "AsyncGeneratorYieldWithAwaitResolveClosure": ROLE_AWAIT,
    "AsyncGeneratorReturnResolveClosure": ROLE_AWAIT,
    "AsyncGeneratorReturnClosedResolveClosure": ROLE_AWAIT,
    "AsyncFunctionAwaitRejectClosure": ROLE_AWAIT_REJECT,
    "AsyncGeneratorAwaitRejectClosure": ROLE_AWAIT_REJECT,
    "AsyncGeneratorReturnClosedRejectClosure": ROLE_AWAIT_REJECT,
    "PromiseAllResolveElementClosure": ROLE_ALL,
    "PromiseAllSettledResolveElementClosure": ROLE_ALL_SETTLED,
    "PromiseAnyRejectElementClosure": ROLE_ANY,
    "PromiseCapabilityDefaultResolve": ROLE_DEFAULT_RESOLVE,
}
NEEDED = frozenset(name for name, role in BUILTIN_ROLES.items() if role != ROLE_AWAIT or name.startswith("AsyncFunction"))
MAX_BUILTINS = 16  # V8_ASYNC_BUILTINS
_DISPLACEMENT = struct.Struct("<i")
_ENTRY = struct.Struct("<Q")


class AsyncChainError(Exception):
    """The binary's async callers cannot be read from a sample; the message says why."""


@dataclass(frozen=True)
class AsyncChain:
    """Where a V8 build keeps what the async callers' walk starts from."""

    isolate_tls: int  # g_current_isolate_ from the thread pointer
    microtask_at: int  # the isolate's current microtask
    builtins: tuple[tuple[int, int], ...]  # (builtin id, ROLE_*)
    leading_data: bool = True  # tasks and reactions begin with the embedder data (V8 12.4 on)


def read_chain(
    handle: BinaryIO,
    header: elf_format.ElfHeader,
    sections: list,
    symbols: list[elf_format.NamedSymbol],
    version: tuple[int, int],
) -> AsyncChain:
    """AsyncChain from the binary's symbols (SYMBOL_PREFIXES and isolate's among them)."""
    if version < MIN_VERSION and version != LEGACY_VERSION:
        raise AsyncChainError(
            f"its V8 {version[0]}.{version[1]} lays out promises and microtasks otherwise; jitprof reads them "
            "in V8 11.3 (node 20) and from V8 12.4 (node 22) on"
        )
    try:
        isolate_tls = isolate.thread_isolate_offset(handle, header, symbols)
    except isolate.IsolateError as error:
        raise AsyncChainError(str(error)) from error
    legacy = version == LEGACY_VERSION
    # Where the root is read from: V8's accessor, or (inlined) the builtin that stores it.
    accessor_name, code_bytes = (RUN_MICROTASKS, RUN_MICROTASKS_BYTES) if legacy else (CURRENT_MICROTASK, isolate.CODE_BYTES)
    accessor = next((symbol for symbol in symbols if symbol.name == accessor_name), None)
    metadata = next(
        (
            symbol
            for symbol in symbols
            if symbol.name.startswith(BUILTIN_METADATA_PREFIX) and symbol.name.endswith(BUILTIN_METADATA_SUFFIX)
        ),
        None,
    )
    if accessor is None or metadata is None:
        raise AsyncChainError("its V8 symbols do not say where the current microtask is")
    try:
        code = elf_format.symbol_prefix(handle, accessor, sections, header, code_bytes)
        ids = builtin_ids(handle, header, sections, metadata)
    except PARSE_ERRORS as error:
        raise AsyncChainError(f"its symbols cannot be read ({error})") from error
    if code is None:
        raise AsyncChainError(f"its {accessor.name} has no code in the file")
    missing = sorted(NEEDED - ids.keys())
    if missing:
        raise AsyncChainError(f"its V8 has no builtin {missing[0]}")
    builtins = tuple((ids[name], role) for name, role in BUILTIN_ROLES.items() if name in ids)[:MAX_BUILTINS]
    try:
        microtask_at = stored_root(code) + ISOLATE_ROOT_BIAS if legacy else isolate.loaded_field(code, "current_microtask()")
    except isolate.IsolateError as error:
        raise AsyncChainError(str(error)) from error
    return AsyncChain(isolate_tls, microtask_at, builtins, leading_data=not legacy)


def stored_root(code: bytes) -> int:
    """The root RunMicrotasks keeps its running task in: its first store
    relative to the root register (`mov %reg, disp32(%r13)`), which the
    builtin stores again (undefined) when the queue is done; any other
    shape is refused."""
    stores: list[int] = []
    for at in range(len(code) - 6):
        rex, opcode, modrm = code[at], code[at + 1], code[at + 2]
        # REX.W and REX.B (r13), any source register; mod 10, rm 101: disp32(%r13).
        if rex in (0x49, 0x4D) and opcode == 0x89 and modrm & 0xC7 == 0x85:
            stores.append(_DISPLACEMENT.unpack_from(code, at + 3)[0])
    if not stores or stores.count(stores[0]) < 2 or not 0 < stores[0] < 1 << 16 or stores[0] % POINTER:
        raise isolate.IsolateError(f"its {RUN_MICROTASKS} is not the code jitprof knows")
    return stores[0]


def builtin_ids(
    handle: BinaryIO, header: elf_format.ElfHeader, sections: list, metadata: elf_format.NamedSymbol
) -> dict[str, int]:
    """The builtins named in BUILTIN_ROLES, by their index in V8's builtin_metadata."""
    if not METADATA_ENTRY_BYTES <= metadata.size <= MAX_METADATA_BYTES:
        raise AsyncChainError("its builtin table is not the size jitprof knows")
    table = elf_format.bytes_at_address(handle, header, sections, metadata.value, metadata.size)
    if table is None:
        raise AsyncChainError("its builtin table is not in the file")
    pointers = [_ENTRY.unpack_from(table, at)[0] for at in range(0, len(table) - POINTER + 1, METADATA_ENTRY_BYTES)]
    # The names lie mostly side by side: read in windows, a few reads in all.
    wanted = {name.encode() for name in BUILTIN_ROLES}
    found: dict[str, int] = {}
    window_start, window = -1, b""
    reads = 0
    for index, pointer in sorted(enumerate(pointers), key=lambda item: item[1]):
        start = pointer - window_start
        if window_start < 0 or not 0 <= start <= len(window) - MAX_NAME_BYTES:
            reads += 1
            if reads > MAX_NAME_READS:
                raise AsyncChainError("its builtins' names are not where jitprof looks")
            window_start, start = pointer, 0
            window = (
                elf_format.bytes_at_address(handle, header, sections, pointer, NAMES_WINDOW_BYTES)
                or elf_format.bytes_at_address(handle, header, sections, pointer, MAX_NAME_BYTES)
                or b""
            )
            if not window:
                continue
        end = window.find(b"\0", start, start + MAX_NAME_BYTES)
        name = window[start:end] if end >= 0 else b""
        if name in wanted:
            found[name.decode()] = index
    return found


@dataclass(frozen=True)
class ObjectTypes:
    """The instance types the chain checks (v8dbg type_* values)."""

    functions: tuple[int, int]
    fulfill_job: int
    reject_job: int
    promise: int
    reaction: int
    async_function: int
    async_generator: int
    request: int
    capability: int


def object_types(type_id: Callable[[str], int | None], functions: tuple[int, int]) -> ObjectTypes | None:
    """The types from the metadata (type_id: a class's type_* value), None if it lacks one."""
    names = (
        "PromiseFulfillReactionJobTask",
        "PromiseRejectReactionJobTask",
        "JSPromise",
        "PromiseReaction",
        "JSAsyncFunctionObject",
        "JSAsyncGeneratorObject",
        "AsyncGeneratorRequest",
        "PromiseCapability",
    )
    found = [type_id(name) for name in names]
    if any(value is None for value in found):
        return None
    return ObjectTypes(functions, *(value for value in found if value is not None))


def kernel_config(
    chain: AsyncChain,
    types: ObjectTypes,
    map_type_at: int,
    function_shared_at: int,
    function_context_at: int,
    shared_builtin_at: int,
    context_min_slots: int,
) -> dict[str, int | tuple[int, ...]]:
    """struct v8_async_config's fields, by name."""
    slots = 2 * POINTER  # a Context's slots follow its map and length
    lead = 1 if chain.leading_data else 0
    return {
        "isolate_tls": chain.isolate_tls,
        "microtask_at": chain.microtask_at,
        "function_types": types.functions,
        "fulfill_job_type": types.fulfill_job,
        "reject_job_type": types.reject_job,
        "promise_type": types.promise,
        "reaction_type": types.reaction,
        "async_function_type": types.async_function,
        "async_generator_type": types.async_generator,
        "request_type": types.request,
        "capability_type": types.capability,
        "native_context_type": 0xFFFF,  # (not in the metadata: a native context fails the capability's check)
        "builtin_ids": tuple(builtin for builtin, _role in chain.builtins),
        "builtin_roles": tuple(role for _builtin, role in chain.builtins),
        "map_type_at": map_type_at,
        "function_shared_at": function_shared_at,
        "function_context_at": function_context_at,
        "shared_builtin_at": shared_builtin_at,
        # From V8 12.4 a Microtask and a PromiseReaction begin with the
        # continuation-preserved embedder data; before, it came last.
        "task_handler_at": (3 + lead) * POINTER,  # map, [embedder data], argument, context, handler
        "task_promise_at": (4 + lead) * POINTER,
        "reaction_next_at": (1 + lead) * POINTER,
        "reaction_reject_at": (2 + lead) * POINTER,
        "reaction_fulfill_at": (3 + lead) * POINTER,
        "reaction_promise_at": (4 + lead) * POINTER,
        "promise_reactions_at": 3 * POINTER,  # after a JSObject's map, properties, elements
        "promise_flags_at": 4 * POINTER,
        "generator_function_at": 3 * POINTER,
        "generator_position_at": 6 * POINTER,  # input_or_debug_pos: the bytecode offset it waits at
        "generator_continuation_at": 8 * POINTER,
        "generator_promise_at": 10 * POINTER,
        "generator_queue_at": 10 * POINTER,
        "request_promise_at": 4 * POINTER,
        "capability_promise_at": POINTER,
        "context_extension_at": slots + 2 * POINTER,
        "combinator_capability_at": slots + (context_min_slots + 1) * POINTER,
        "resolve_promise_at": slots + context_min_slots * POINTER,
        "properties_at": POINTER,
    }
