"""Unwind rows: the format the BPF walker reads, one row per address range.

A row says, from its address until the next row's, how to find the caller:
the CFA rule (rsp+off, rbp+off, rbx+off, the standard PLT expression, a
signal frame, the end of the stack, or nothing usable) and where the caller's
rbp and rbx were saved (rbx only matters to a frame whose CFA it holds: the
dynamic loader's trampolines, which realign the stack).
The return address is always at CFA-8 on x86-64; a row where it is not is
"unsupported". Every FDE is closed by a GAP row, so an address between
functions is known to have no rule (the walker then takes a frame-pointer
step) instead of inheriting its neighbour's.
"""

from __future__ import annotations

import bisect
import enum
import struct
from dataclasses import dataclass, field

RSP = 7

RBP = 6

RBX = 3

RETURN_ADDRESS = 16

MAX_ROW_PC = 0xFFFFFFFF  # rows hold 32-bit file addresses

ROW_FORMAT = struct.Struct("<IBBhii")

ROW_SIZE = ROW_FORMAT.size


class CfaType(enum.IntEnum):
    GAP = 0  # no rule here: frame-pointer step
    RSP = 1
    RBP = 2
    PLT = 3  # cfa_offset holds the expression's threshold (10 or 11)
    SIGNAL = 4  # a signal trampoline: registers are in the ucontext on the stack
    END_OF_STACK = 5  # the return address is undefined: the walk is complete
    UNSUPPORTED = 6  # a rule the walker cannot follow: frame-pointer step
    RBX = 7


class RbpRule(enum.IntEnum):
    SAME = 0  # the caller's rbp is still in rbp
    OFFSET = 1  # saved at CFA + rbp_offset


class RbxRule(enum.IntEnum):
    """Bits of the same byte as RbpRule."""

    SAME = 0  # the caller's rbx is still in rbx
    OFFSET = 2  # saved at CFA + rbx_offset
    LOST = 4  # kept where the walkers do not look: not known


@dataclass(frozen=True)
class UnwindRow:
    """How to find the caller's frame from one address on."""

    pc: int
    cfa_type: CfaType
    cfa_offset: int = 0
    rbp_rule: RbpRule = RbpRule.SAME
    rbp_offset: int = 0
    rbx_rule: RbxRule = RbxRule.SAME
    rbx_offset: int = 0

    def same_rule(self, other: UnwindRow) -> bool:
        return self.rule() == other.rule()

    def rule(self) -> tuple[int, ...]:
        return (self.cfa_type, self.cfa_offset, self.rbp_rule, self.rbp_offset, self.rbx_rule, self.rbx_offset)


@dataclass
class UnwindTable:
    """A file's unwind rows, sorted by address."""

    rows: list[UnwindRow]
    fde_count: int = 0
    failed_fde_starts: list[int] = field(default_factory=list)  # undecodable: they stay gaps
    _pcs: list[int] = field(default_factory=list, repr=False)

    def lookup(self, pc: int) -> UnwindRow | None:
        """The row in effect at pc (what the BPF walker's search finds)."""
        if len(self._pcs) != len(self.rows):
            self._pcs = [row.pc for row in self.rows]
        index = bisect.bisect_right(self._pcs, pc) - 1
        return self.rows[index] if index >= 0 else None

    def pack(self) -> bytes:
        return b"".join(pack_row(row) for row in self.rows)


def pack_row(row: UnwindRow) -> bytes:
    return ROW_FORMAT.pack(row.pc, row.cfa_type, row.rbp_rule | row.rbx_rule, row.rbx_offset, row.cfa_offset, row.rbp_offset)


def unpack_rows(data: bytes) -> list[UnwindRow]:
    usable = len(data) - len(data) % ROW_SIZE
    return [
        UnwindRow(
            pc,
            CfaType(cfa_type),
            cfa_offset,
            RbpRule(saved_rules & RbpRule.OFFSET),
            rbp_offset,
            RbxRule(saved_rules & (RbxRule.OFFSET | RbxRule.LOST)),
            rbx_offset,
        )
        for pc, cfa_type, saved_rules, rbx_offset, cfa_offset, rbp_offset in ROW_FORMAT.iter_unpack(data[:usable])
    ]
