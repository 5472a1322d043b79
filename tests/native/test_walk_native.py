"""The copy walker (native/walk.c): the kernel walker's rules over a stack
copy, on hand-built stacks whose every frame is known; and no bad read on
random ones (its ASan build)."""

import struct
import subprocess

import pytest

from profiler.kernel.events import WalkEnd
from profiler.native import library, unwind_rows
from profiler.native.unwind_rows import CfaType, RbpRule, RbxRule, UnwindRow
from tests.helpers import ROOT

STACK = 0x7FFE0000
TEXT = 0x400000  # an ELF mapping, file address 0 at TEXT
JIT = 0x10000000

# Rows (file addresses): leaf() keeps its CFA at rsp+16; caller() is an
# rbp-framed function; plt stubs; a signal trampoline; _start ends the stack.
ROWS = [
    (0x1000, CfaType.RSP, 16, RbpRule.SAME, 0),  # leaf
    (0x1100, CfaType.GAP, 0, RbpRule.SAME, 0),
    (0x2000, CfaType.RBP, 16, RbpRule.OFFSET, -16),  # caller
    (0x2100, CfaType.GAP, 0, RbpRule.SAME, 0),
    (0x3000, CfaType.END_OF_STACK, 0, RbpRule.SAME, 0),  # _start
    (0x3100, CfaType.GAP, 0, RbpRule.SAME, 0),
    (0x4000, CfaType.PLT, 11, RbpRule.SAME, 0),  # .plt
    (0x4100, CfaType.GAP, 0, RbpRule.SAME, 0),
    (0x5000, CfaType.SIGNAL, 0, RbpRule.SAME, 0),  # __restore_rt
    (0x5010, CfaType.GAP, 0, RbpRule.SAME, 0),
]
# The dynamic loader's lazy binding: _dl_fixup saves rbx (at CFA-16), called
# from _dl_runtime_resolve, which keeps its CFA in rbx (rbx+32, its caller's
# rbx saved at CFA-32) because it realigns the stack.
RBX_ROWS = [
    UnwindRow(0x6000, CfaType.RSP, 16, rbx_rule=RbxRule.OFFSET, rbx_offset=-16),  # _dl_fixup
    UnwindRow(0x6100, CfaType.GAP),
    UnwindRow(0x7000, CfaType.RBX, 32, rbx_rule=RbxRule.OFFSET, rbx_offset=-32),  # _dl_runtime_resolve
    UnwindRow(0x7100, CfaType.GAP),
]
PACKED = (
    b"".join(
        unwind_rows.ROW_FORMAT.pack(pc, cfa, rule, 0, cfa_offset, rbp_offset) for pc, cfa, cfa_offset, rule, rbp_offset in ROWS
    )
    + unwind_rows.UnwindTable(RBX_ROWS).pack()
)


def mappings(text_kind=library.MAPPING_ELF, rows=PACKED):
    return [
        library.WalkMapping(TEXT, TEXT + 0x10000, TEXT, text_kind, rows),
        library.WalkMapping(JIT, JIT + 0x10000, 0, library.MAPPING_JIT),
    ]


def stack_of(words: dict[int, int], length: int) -> bytes:
    """length bytes of stack from STACK, with words at their offsets."""
    data = bytearray(length)
    for offset, value in words.items():
        if offset + 8 <= length:
            struct.pack_into("<Q", data, offset, value)
    return bytes(data)


def walk(
    words, length=0x100, start=(TEXT + 0x1050, STACK, STACK + 0x20), exact=True, reached_end=False, maps=None, max_frames=127
):
    pc, sp, fp, *rbx = start
    result = library.walk_copy(
        maps if maps is not None else mappings(),
        library.WalkStack(stack_of(words, length), STACK, reached_end),
        library.WalkRegisters(pc, sp, fp, exact, *rbx),
        max_frames,
    )
    return result.frames, result.end


# leaf (CFA rsp+16) -> caller (rbp frame) -> _start: the return addresses and
# the caller's saved rbp where a compiler puts them.
NATIVE = {0x08: TEXT + 0x2050, 0x20: 0, 0x28: TEXT + 0x3010}


def test_rows_walk_a_native_stack_to_its_end():
    frames, end = walk(NATIVE)
    assert frames == (TEXT + 0x1050, TEXT + 0x2050, TEXT + 0x3010)
    assert end == WalkEnd.COMPLETE


def test_a_read_beyond_the_copy_is_a_short_copy_unless_the_stack_ended_there():
    frames, end = walk(NATIVE, length=0x20)
    assert frames == (TEXT + 0x1050, TEXT + 0x2050) and end == WalkEnd.COPY_TOO_SHORT
    assert walk(NATIVE, length=0x20, reached_end=True)[1] == WalkEnd.READ_FAULT


def test_frame_pointers_through_jit_code_then_rows():
    # JIT frame (fp chain at 0x40) -> JIT frame -> leaf's caller in ELF code
    words = {0x40: STACK + 0x60, 0x48: JIT + 0x200, 0x60: STACK + 0x20, 0x68: TEXT + 0x2050, 0x20: 0, 0x28: TEXT + 0x3010}
    frames, end = walk(words, start=(JIT + 0x100, STACK, STACK + 0x40))
    assert frames == (JIT + 0x100, JIT + 0x200, TEXT + 0x2050, TEXT + 0x3010)
    assert end == WalkEnd.COMPLETE


def test_a_file_without_rows_takes_frame_pointer_steps():
    words = {0x20: STACK + 0x40, 0x28: TEXT + 0x2050, 0x40: 0, 0x48: 0}
    frames, end = walk(words, maps=mappings(rows=b""))
    assert frames == (TEXT + 0x1050, TEXT + 0x2050) and end == WalkEnd.COMPLETE


def test_a_table_being_built_stops_the_walk_to_be_tried_again():
    words = {0x40: STACK + 0x60, 0x48: TEXT + 0x2050}
    frames, end = walk(words, start=(JIT + 0x100, STACK, STACK + 0x40), maps=mappings(text_kind=library.MAPPING_PENDING))
    assert end == library.WALK_PENDING
    assert frames == (JIT + 0x100,)  # the frames before it


def test_plt_stubs_and_signal_frames():
    # A PLT stub at offset 12 of its entry (pushed: CFA sp+16) returning into leaf.
    words = {0x08: TEXT + 0x1050}
    frames, _end = walk(words, start=(TEXT + 0x400C, STACK, 0))
    assert frames[:2] == (TEXT + 0x400C, TEXT + 0x1050)
    # __restore_rt: the interrupted pc, sp and rbp from the ucontext; the pc
    # is exact there (the next lookup is not pc - 1).
    words = {168: TEXT + 0x1000, 160: STACK + 0x200, 120: STACK + 0x220, 0x208: TEXT + 0x2050, 0x220: 0, 0x228: TEXT + 0x3010}
    frames, end = walk(words, length=0x300, start=(TEXT + 0x5000, STACK, 0))
    assert frames == (TEXT + 0x5000, TEXT + 0x1000, TEXT + 0x2050, TEXT + 0x3010)
    assert end == WalkEnd.COMPLETE


# In _dl_fixup, called through the trampoline from caller(): _dl_fixup's
# saved rbx (the trampoline's, its CFA - 32) at sp, the return addresses at
# sp + 8 and at the trampoline's CFA - 8; caller's rbp frame above.
TRAMPOLINE_RBX = STACK + 0x80
LAZY_BINDING = {0x00: TRAMPOLINE_RBX, 0x08: TEXT + 0x7050, 0x98: TEXT + 0x2050, 0xA0: 0, 0xA8: TEXT + 0x3010}


def test_a_frame_that_keeps_its_cfa_in_rbx():
    frames, end = walk(LAZY_BINDING, start=(TEXT + 0x6050, STACK, STACK + 0xA0, 0x1234))
    assert frames == (TEXT + 0x6050, TEXT + 0x7050, TEXT + 0x2050, TEXT + 0x3010) and end == WalkEnd.COMPLETE
    # Interrupted by a signal inside the trampoline: rbx from the ucontext.
    ucontext = {0x100 + 168: TEXT + 0x7060, 0x100 + 160: STACK + 0x40, 0x100 + 120: STACK + 0xA0, 0x100 + 128: TRAMPOLINE_RBX}
    words = ucontext | LAZY_BINDING
    frames, end = walk(words, length=0x300, start=(TEXT + 0x5000, STACK + 0x100, 0))
    assert frames == (TEXT + 0x5000, TEXT + 0x7060, TEXT + 0x2050, TEXT + 0x3010) and end == WalkEnd.COMPLETE


def test_rbx_not_known_is_not_followed():
    # Reached by a frame-pointer step out of JIT code, which may have used
    # rbx: the trampoline's frame falls back to its frame pointer (below sp
    # here: a bad frame, not a wrong caller).
    words = {0x40: STACK + 0x10, 0x48: TEXT + 0x7050, 0x00: TRAMPOLINE_RBX}
    frames, end = walk(words, start=(JIT + 0x100, STACK, STACK + 0x40, TRAMPOLINE_RBX))
    assert frames == (JIT + 0x100, TEXT + 0x7050) and end == WalkEnd.BAD_FRAME


def test_the_kernel_walkers_other_ends():
    assert walk({}, start=(0x1234, STACK, 0))[1] == WalkEnd.NO_MAPPING
    # A frame pointer below the stack pointer is not a chain.
    assert walk({}, start=(JIT + 0x100, STACK + 0x40, STACK))[1] == WalkEnd.BAD_FRAME
    frames, end = walk(NATIVE, max_frames=2)
    assert len(frames) == 2 and end == WalkEnd.TRUNCATED
    assert walk(NATIVE, max_frames=0) == ((), WalkEnd.TRUNCATED)


def test_random_stacks_under_address_sanitizer():
    fuzzer = ROOT / "native" / "build" / "fuzz_walk"
    assert fuzzer.exists(), "native/build/fuzz_walk missing: run make setup"
    run = subprocess.run([str(fuzzer), "100000", "/lib/x86_64-linux-gnu/libc.so.6"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    ends = {int(line.split()[1]) for line in run.stdout.splitlines() if line.startswith("end ")}
    # Every way a walk can end was reached.
    assert {
        WalkEnd.COMPLETE,
        WalkEnd.TRUNCATED,
        WalkEnd.NO_MAPPING,
        WalkEnd.READ_FAULT,
        WalkEnd.BAD_FRAME,
        WalkEnd.COPY_TOO_SHORT,
        library.WALK_PENDING,
    } <= ends


@pytest.mark.parametrize("length", [0, 7, 9])
def test_odd_copy_lengths(length):
    frames, end = walk(NATIVE, length=length)
    assert frames == (TEXT + 0x1050,) and end == WalkEnd.COPY_TOO_SHORT


def test_random_source_map_strings_under_address_sanitizer():
    """The source-map lookup reads a target's file: random mappings strings,
    each in a buffer of its exact size, at random positions."""
    fuzzer = ROOT / "native" / "build" / "fuzz_source_map"
    assert fuzzer.exists(), "native/build/fuzz_source_map missing: run make setup"
    run = subprocess.run([str(fuzzer), "300000"], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    accepted, refused = (int(word) for word in run.stdout.split()[1::2])
    assert accepted > 5_000 and refused > 5_000  # both ways through the lookup
