"""Address ranges as LPM trie prefixes, keyed by (pid, address).

The BPF trie matches on 96 bits: the pid (32, big-endian) then the address
(64, big-endian). A range [start, end) of one process is covered by the
fewest aligned power-of-two blocks; each block becomes one prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

PID_BITS = 32
ADDRESS_BITS = 64
FULL_PREFIX = PID_BITS + ADDRESS_BITS


@dataclass(frozen=True)
class TriePrefix:
    """A key of the kernel's trie: an aligned block of one process's addresses."""

    pid: int
    address: int  # first address of the aligned block
    prefix_len: int  # bits of (pid, address) that must match

    @property
    def block_size(self) -> int:
        return 1 << (FULL_PREFIX - self.prefix_len)

    def key_fields(self) -> tuple[int, int]:
        """(pid_be, address_be) as integers whose little-endian storage is big-endian."""
        pid_be = int.from_bytes(self.pid.to_bytes(4, "big"), "little")
        address_be = int.from_bytes(self.address.to_bytes(8, "big"), "little")
        return pid_be, address_be


def split_range(pid: int, start: int, end: int) -> list[TriePrefix]:
    """Cover [start, end) with aligned blocks, largest first where alignment allows."""
    if not 0 <= start < end <= 1 << ADDRESS_BITS:
        raise ValueError(f"bad range {start:#x}-{end:#x}")
    prefixes = []
    cursor = start
    while cursor < end:
        # Largest block aligned at cursor...
        alignment_bits = (cursor & -cursor).bit_length() - 1 if cursor else ADDRESS_BITS
        # ...that does not run past end.
        size_bits = min(alignment_bits, (end - cursor).bit_length() - 1)
        prefixes.append(TriePrefix(pid, cursor, FULL_PREFIX - size_bits))
        cursor += 1 << size_bits
    return prefixes


MAX_PROVISIONAL_LENGTH = 1 << 30


def covering_prefix(pid: int, start: int, length: int) -> TriePrefix | None:
    """The one aligned block the BPF program covers a new executable range
    with (bpf/process_events.bpf.h: cover_new_exec_range), so user space can remove it."""
    if length <= 0 or length > MAX_PROVISIONAL_LENGTH:
        return None
    bits = (start ^ (start + length - 1)).bit_length()
    if bits >= ADDRESS_BITS:
        return None
    return TriePrefix(pid, start & ~((1 << bits) - 1), FULL_PREFIX - bits)
