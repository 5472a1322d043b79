import random

import pytest

from profiler.kernel.trie import FULL_PREFIX, TriePrefix, split_range


def covered(prefixes):
    return [(p.address, p.address + p.block_size) for p in prefixes]


@pytest.mark.parametrize(
    "start,end",
    [
        (0x1000, 0x2000),
        (0x55D0C4A01000, 0x55D0C4A02000),
        (0x7F1A3A628000, 0x7F1A3A7BD000),
        (0x1000, 0x10000000),
        (0x0, 0x1000),
        (0x3, 0x11),  # unaligned ends still cover exactly
    ],
)
def test_blocks_cover_the_range_exactly_and_are_aligned(start, end):
    prefixes = split_range(42, start, end)
    blocks = covered(prefixes)
    assert blocks[0][0] == start and blocks[-1][1] == end
    for (_, block_end), (next_start, _) in zip(blocks, blocks[1:]):
        assert block_end == next_start
    for prefix in prefixes:
        assert prefix.address % prefix.block_size == 0
        assert 32 <= prefix.prefix_len <= FULL_PREFIX


def test_block_count_is_logarithmic():
    rng = random.Random(7)
    for _ in range(200):
        start = rng.randrange(0, 1 << 47) & ~0xFFF
        end = start + (rng.randrange(1, 1 << 30) & ~0xFFF or 0x1000)
        # At most two blocks per bit of the range's length.
        assert len(split_range(1, start, end)) <= 2 * 36


def test_aligned_power_of_two_is_one_prefix():
    (prefix,) = split_range(7, 0x400000, 0x800000)
    assert prefix.prefix_len == FULL_PREFIX - 22


def test_key_fields_store_big_endian():
    prefix = TriePrefix(pid=0x01020304, address=0x1122334455667788, prefix_len=96)
    pid_be, address_be = prefix.key_fields()
    assert pid_be.to_bytes(4, "little") == bytes([1, 2, 3, 4])
    assert address_be.to_bytes(8, "little") == bytes.fromhex("1122334455667788")


def test_rejects_empty_or_inverted_ranges():
    with pytest.raises(ValueError):
        split_range(1, 0x2000, 0x2000)
    with pytest.raises(ValueError):
        split_range(1, 0x3000, 0x2000)
