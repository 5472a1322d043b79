"""The pyelftools table compiler, kept as the oracle for native/unwind.c: the
same rows from the same .eh_frame (or .debug_frame), 100-200 times slower."""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import BinaryIO

from elftools.common.exceptions import DWARFError, ELFError
from elftools.dwarf.callframe import FDE
from elftools.elf.constants import SH_FLAGS
from elftools.elf.elffile import ELFFile

from profiler.native.unwind_rows import (
    MAX_ROW_PC,
    RBP,
    RBX,
    RETURN_ADDRESS,
    RSP,
    CfaType,
    RbpRule,
    RbxRule,
    UnwindRow,
    UnwindTable,
)

# DW_OP_breg7 8; DW_OP_breg16 0; DW_OP_lit15; DW_OP_and; DW_OP_lit<N>; DW_OP_ge;
# DW_OP_lit3; DW_OP_shl; DW_OP_plus: rsp + 8 + ((rip & 15) >= N ? 8 : 0).
_PLT_PREFIX = bytes([0x77, 0x08, 0x80, 0x00, 0x3F, 0x1A])
_PLT_SUFFIX = bytes([0x2A, 0x33, 0x24, 0x22])
_GNU_ARGS_SIZE = 0x2E
# glibc's __restore_rt: CFA = *(rsp + 160), registers read from the ucontext.
_SIGNAL_CFA = bytes([0x77, 0xA0, 0x01, 0x06])
CLONE_GAP_MAX_BYTES = 16
SYSCALL = bytes([0x0F, 0x05])


def _fits_i32(value: int) -> bool:
    return -(1 << 31) <= value < (1 << 31)


def _row_from_decoded(pc: int, decoded: dict) -> UnwindRow:
    cfa = decoded["cfa"]
    return_address = decoded.get(RETURN_ADDRESS)
    if return_address is not None and return_address.type == "UNDEFINED":
        return UnwindRow(pc, CfaType.END_OF_STACK)
    if cfa.expr is not None:
        expression = bytes(cfa.expr)
        if expression == _SIGNAL_CFA:
            return UnwindRow(pc, CfaType.SIGNAL)
        if (
            len(expression) == len(_PLT_PREFIX) + 1 + len(_PLT_SUFFIX)
            and expression.startswith(_PLT_PREFIX)
            and expression.endswith(_PLT_SUFFIX)
            and 0x30 <= expression[len(_PLT_PREFIX)] <= 0x4F
        ):
            return UnwindRow(pc, CfaType.PLT, expression[len(_PLT_PREFIX)] - 0x30)
        return UnwindRow(pc, CfaType.UNSUPPORTED)
    if cfa.reg == RSP:
        cfa_type = CfaType.RSP
    elif cfa.reg == RBP:
        cfa_type = CfaType.RBP
    elif cfa.reg == RBX:
        cfa_type = CfaType.RBX
    else:
        return UnwindRow(pc, CfaType.UNSUPPORTED)
    if return_address is None or return_address.type != "OFFSET" or return_address.arg != -8:
        return UnwindRow(pc, CfaType.UNSUPPORTED)
    if not _fits_i32(cfa.offset):
        return UnwindRow(pc, CfaType.UNSUPPORTED)
    saved_rbx = decoded.get(RBX)
    rbx_rule, rbx_offset = RbxRule.SAME, 0
    if saved_rbx is not None and saved_rbx.type == "OFFSET" and -(1 << 15) <= saved_rbx.arg < (1 << 15):
        rbx_rule, rbx_offset = RbxRule.OFFSET, saved_rbx.arg
    elif saved_rbx is not None and saved_rbx.type != "SAME_VALUE":
        rbx_rule = RbxRule.LOST
    saved_rbp = decoded.get(RBP)
    if saved_rbp is None or saved_rbp.type in ("SAME_VALUE", "UNDEFINED"):
        return UnwindRow(pc, cfa_type, cfa.offset, rbx_rule=rbx_rule, rbx_offset=rbx_offset)
    if saved_rbp.type == "OFFSET" and _fits_i32(saved_rbp.arg):
        return UnwindRow(pc, cfa_type, cfa.offset, RbpRule.OFFSET, saved_rbp.arg, rbx_rule, rbx_offset)
    return UnwindRow(pc, CfaType.UNSUPPORTED)


def fde_count_hint(handle: BinaryIO) -> int:
    """The FDE count from .eh_frame_hdr (cheap, before the slow parse); 0 if unknown."""
    try:
        handle.seek(0)
        section = ELFFile(handle).get_section_by_name(".eh_frame_hdr")
        if section is None:
            return 0
        header = section.data()[:12]
        # version 1, eh_frame_ptr and fde_count as 4-byte values (DW_EH_PE_*data4).
        if len(header) < 12 or header[0] != 1 or header[1] & 0x0F not in (0x03, 0x0B) or header[2] & 0x0F not in (0x03, 0x0B):
            return 0
        return struct.unpack_from("<I", header, 8)[0]
    except (ELFError, ValueError, struct.error, OSError):
        return 0


class BuildCancelled(Exception):
    pass


def compile_table(
    handle: BinaryIO,
    progress: Callable[[int, int], None] | None = None,
    cancelled: Callable[[], bool] | None = None,
) -> UnwindTable:
    """Rows for every FDE of an ELF file, sorted, gaps marked, repeats merged.
    Raises BuildCancelled when cancelled() turns true (checked as it goes)."""
    handle.seek(0)
    try:
        elf = ELFFile(handle)
        if elf.elfclass != 64 or elf["e_machine"] != "EM_X86_64":
            return UnwindTable([])
        dwarf = elf.get_dwarf_info(relocate_dwarf_sections=False)
        if dwarf.has_EH_CFI():
            entries = dwarf.EH_CFI_entries()
        elif dwarf.has_CFI():
            entries = dwarf.CFI_entries()
        else:
            return UnwindTable([])
    except (ELFError, DWARFError, ValueError, KeyError, struct.error, OSError):
        return UnwindTable([])

    fdes = [entry for entry in entries if isinstance(entry, FDE)]
    table = UnwindTable([], fde_count=len(fdes))
    # (pc, is_gap, row): at one address a real row beats a gap marker.
    placed: list[tuple[int, int, UnwindRow]] = []
    for number, fde in enumerate(fdes):
        if number % 500 == 0:
            if cancelled is not None and cancelled():
                raise BuildCancelled()
            if progress is not None and number % 2000 == 0:
                progress(number, len(fdes))
        start = fde.header["initial_location"]
        end = start + fde.header["address_range"]
        if end > MAX_ROW_PC or end <= start:
            continue
        # DW_CFA_GNU_args_size says how much the caller pushed, not where the
        # CFA is; pyelftools' decoder rejects it, so it is dropped first.
        fde.instructions = [instruction for instruction in fde.instructions if instruction.opcode != _GNU_ARGS_SIZE]
        try:
            decoded_rows = fde.get_decoded().table
        except Exception:  # noqa: BLE001  (pyelftools raises many types on odd CFI)
            table.failed_fde_starts.append(start)
            continue
        for decoded in decoded_rows:
            pc = decoded["pc"]
            if start <= pc < end:
                placed.append((pc, 0, _row_from_decoded(pc, decoded)))
        placed.append((end, 1, UnwindRow(end, CfaType.GAP)))
    if progress is not None:
        progress(len(fdes), len(fdes))
    placed.sort(key=lambda item: (item[0], item[1]))
    one_per_address: list[UnwindRow] = []
    for pc, _is_gap, row in placed:
        if one_per_address and one_per_address[-1].pc == pc:
            continue  # the real row (sorted first) wins over a gap at its address
        one_per_address.append(row)
    rows: list[UnwindRow] = []
    for row in one_per_address:
        if rows and rows[-1].same_rule(row):
            continue  # identical consecutive rows: the earlier one covers both
        rows.append(row)
    table.rows = _continue_through_clone_gaps(rows, elf)
    return table


def _continue_through_clone_gaps(rows: list[UnwindRow], elf: ELFFile) -> list[UnwindRow]:
    """glibc's clone and clone3: a gap of at most CLONE_GAP_MAX_BYTES that
    begins with a syscall instruction, after a rule on rsp, and ends at an
    outermost frame's row takes the rule before it (see native/unwind.c)."""
    kept: list[UnwindRow] = []
    for index, row in enumerate(rows):
        if (
            row.cfa_type is CfaType.GAP
            and kept
            and kept[-1].cfa_type is CfaType.RSP
            and index + 1 < len(rows)
            and rows[index + 1].cfa_type is CfaType.END_OF_STACK
            and rows[index + 1].pc - row.pc <= CLONE_GAP_MAX_BYTES
            and _is_syscall_at(elf, row.pc)
        ):
            continue
        kept.append(row)
    return kept


def _is_syscall_at(elf: ELFFile, address: int) -> bool:
    for section in elf.iter_sections():
        if section["sh_type"] == "SHT_NOBITS" or not section["sh_flags"] & SH_FLAGS.SHF_EXECINSTR:
            continue
        begin = section["sh_addr"]
        if begin <= address and address + 2 <= begin + section["sh_size"]:
            elf.stream.seek(section["sh_offset"] + address - begin)
            return bool(elf.stream.read(2) == SYSCALL)
    return False


# On-disk cache, next to the symbol cache --------------------------------
