"""HotSpot's prologues and epilogues as the kernel's walker decodes them
(bpf/hotspot_code.h, compiled into native/), held to the code HotSpot
emits: the byte sequences below were read from live JVMs' code heaps."""

import re
from pathlib import Path

import pytest

from profiler.native import hotspot_code
from profiler.native.hotspot_code import (
    CODE_BYTES,
    PROLOGUE_BEFORE,
    PROLOGUE_FRAME_BUILT,
    PROLOGUE_RBP_PUSHED,
    PROLOGUE_RBP_UNSAVED,
    PROLOGUE_RETURN_ONLY,
    PROLOGUE_UNKNOWN,
    epilogue_words,
    prologue_state,
)

HEADER = Path(__file__).resolve().parents[2] / "bpf" / "hotspot_code.h"
BEFORE_ENTRY = b"\x90" * 8  # what precedes the verified entry: padding

# C2, -XX:+PreserveFramePointer, a frame without a stack bang (JDK 17):
# sub rsp, 0x18; mov [rsp + 0x10], rbp; mov rbp, rsp; add rbp, 0x10; then the body.
C2_FRAME_POINTERS = [
    (b"\x48\x81\xec\x18\x00\x00\x00", PROLOGUE_RETURN_ONLY),
    (b"\x48\x89\x6c\x24\x10", PROLOGUE_RBP_UNSAVED),
    (b"\x48\x8b\xec", PROLOGUE_FRAME_BUILT),
    (b"\x48\x83\xc5\x10", PROLOGUE_FRAME_BUILT),
]
# C2 without frame pointers: sub rsp; mov [rsp + 0x10], rbp.
C2_PLAIN = [
    (b"\x48\x83\xec\x18", PROLOGUE_RETURN_ONLY),
    (b"\x48\x89\x6c\x24\x10", PROLOGUE_RBP_UNSAVED),
]
# C2 on JDK 25 (an nmethod entry barrier), no frame pointers: sub rsp, 0x18;
# mov [rsp + 0x10], rbp; cmp dword [r15 + 0x20], 1; jne (the barrier's slow
# path). Samples land at the jne (after the compare) as often as in the body.
C2_BARRIER = [
    (b"\x48\x81\xec\x18\x00\x00\x00", PROLOGUE_RETURN_ONLY),
    (b"\x48\x89\x6c\x24\x10", PROLOGUE_RBP_UNSAVED),
    (b"\x41\x81\x7f\x20\x01\x00\x00\x00", PROLOGUE_FRAME_BUILT),
    (b"\x0f\x85\x2a\x00\x00\x00", PROLOGUE_FRAME_BUILT),
]
# C2 on JDK 25 with frame pointers, where the entry barrier's compare is
# padded to a 4-byte boundary (its immediate is patched): ...; add rbp, 0x10;
# nop; cmp dword [r15 + 0x20], 1; jne. Read from a live JVM's code heap on an
# AMD EPYC, where 4-7 % of the samples in two tiny methods were at that nop.
C2_FRAME_POINTERS_PADDED_BARRIER = [
    (b"\x48\x81\xec\x18\x00\x00\x00", PROLOGUE_RETURN_ONLY),
    (b"\x48\x89\x6c\x24\x10", PROLOGUE_RBP_UNSAVED),
    (b"\x48\x8b\xec", PROLOGUE_FRAME_BUILT),
    (b"\x48\x83\xc5\x10", PROLOGUE_FRAME_BUILT),
    (b"\x90", PROLOGUE_FRAME_BUILT),
    (b"\x41\x81\x7f\x20\x01\x00\x00\x00", PROLOGUE_FRAME_BUILT),
    (b"\x0f\x85\x2e\x00\x00\x00", PROLOGUE_FRAME_BUILT),
]
# C1 (and C2 with a stack bang), frame pointers: mov [rsp - 0x14000], eax
# (the bang); push rbp; mov rbp, rsp; sub rsp, 0xf0; then the nmethod entry
# barrier's cmp dword [r15 + 0x20], imm.
C1_FRAME_POINTERS = [
    (b"\x89\x84\x24\x00\xc0\xfe\xff", PROLOGUE_RETURN_ONLY),
    (b"\x55", PROLOGUE_RETURN_ONLY),
    (b"\x48\x8b\xec", PROLOGUE_RBP_PUSHED),
    (b"\x48\x81\xec\xf0\x00\x00\x00", PROLOGUE_RBP_PUSHED),
    (b"\x41\x81\x7f\x20\x01\x00\x00\x00", PROLOGUE_FRAME_BUILT),
]
# The same without frame pointers: push rbp; sub rsp.
C1_PLAIN = [
    (b"\x55", PROLOGUE_RETURN_ONLY),
    (b"\x48\x83\xec\x30", PROLOGUE_RBP_PUSHED),
]


def states_along(instructions: list[tuple[bytes, int]]) -> list[tuple[str, int, int]]:
    """Each instruction's state as decoded at its first byte, beside the one expected."""
    code = BEFORE_ENTRY + b"".join(instruction for instruction, _ in instructions) + b"\xcc" * CODE_BYTES
    found = []
    at = len(BEFORE_ENTRY)
    for instruction, expected in instructions:
        window = code[at - PROLOGUE_BEFORE : at - PROLOGUE_BEFORE + CODE_BYTES]
        found.append((instruction.hex(" "), prologue_state(window), expected))
        at += len(instruction)
    return found


@pytest.mark.parametrize(
    "prologue",
    [C2_FRAME_POINTERS, C2_PLAIN, C2_BARRIER, C2_FRAME_POINTERS_PADDED_BARRIER, C1_FRAME_POINTERS, C1_PLAIN],
    ids=["c2-fp", "c2", "c2-barrier", "c2-fp-padded-barrier", "c1-fp", "c1"],
)
def test_each_step_of_hotspots_prologues_is_known(prologue):
    decoded = states_along(prologue)
    assert [state for _, state, _ in decoded] == [expected for _, _, expected in decoded], decoded


def test_a_frame_pointer_move_after_anything_else_is_not_guessed():
    def state(before: bytes, at: bytes) -> int:
        before = b"\x90" * (PROLOGUE_BEFORE - len(before)) + before
        return prologue_state(before + at + b"\xcc" * (CODE_BYTES - len(before) - len(at)))

    # mov rbp, rsp after a mov [rsp + disp32], rbp: the bytes before it are the displacement's
    assert state(b"\x48\x89\xac\x24\x00\x01\x00\x00", b"\x48\x8b\xec") == PROLOGUE_UNKNOWN
    # add rbp, imm not after mov rbp, rsp: not a prologue's
    assert state(b"", b"\x48\x83\xc5\x10") == PROLOGUE_UNKNOWN
    # a jne after anything but the entry barrier's compare (the inline cache check's)
    assert state(b"\x44\x3b\x50\x08", b"\x0f\x85\x50\xe6\xab\xff") == PROLOGUE_UNKNOWN
    # padding of each length before the barrier's compare; a nop before anything else is not a prologue's
    compare = b"\x41\x81\x7f\x20\x01\x00\x00\x00"
    for padding in (b"\x90", b"\x66\x90", b"\x66\x66\x90", b"\x0f\x1f\x00"):
        assert state(b"\x48\x83\xc5\x10", padding + compare) == PROLOGUE_FRAME_BUILT
        assert state(b"\x48\x83\xc5\x10", padding + b"\xc5\xfb\x58\x05") == PROLOGUE_UNKNOWN


def test_epilogues_are_read_as_the_kernel_reads_them():
    def words(code: bytes) -> int:
        return epilogue_words(code + b"\xcc" * (CODE_BYTES - len(code)))

    assert words(b"\xc3") == 1  # ret
    assert words(b"\x5d\xc3") == 2  # pop rbp; ret
    # pop rbp; cmp rsp, [r15 + disp32]; ja rel32; ret (the return's poll)
    assert words(b"\x5d\x49\x3b\xa7\x00\x01\x00\x00\x0f\x87\x10\x00\x00\x00\xc3\x90") == 2
    assert words(b"\x49\x3b\x67\x20\x77\x05\xc3") == 1  # cmp rsp, [r15 + disp8]; ja; ret
    assert words(b"\x5d\x90\xc3") == 0
    assert words(b"\x48\x89\xe5") == 0


def test_too_few_bytes_are_refused_not_read_past():
    with pytest.raises(ValueError):
        epilogue_words(b"\x5d")
    with pytest.raises(ValueError):
        prologue_state(b"\x55" * (CODE_BYTES - 1))


def test_the_states_are_the_headers():
    defined = dict(re.findall(rb"^#define (PROLOGUE_[A-Z_]+) (\d+)", HEADER.read_bytes(), re.MULTILINE))
    assert defined and {name.decode(): int(value) for name, value in defined.items()} == {
        name: getattr(hotspot_code, name)
        for name in dir(hotspot_code)
        if name.startswith("PROLOGUE_") and name != "PROLOGUE_BEFORE"
    }
    assert int(re.search(rb"#define HOTSPOT_CODE_BYTES (\d+)", HEADER.read_bytes()).group(1)) == CODE_BYTES
    assert int(re.search(rb"#define HOTSPOT_PROLOGUE_BEFORE (\d+)", HEADER.read_bytes()).group(1)) == PROLOGUE_BEFORE
