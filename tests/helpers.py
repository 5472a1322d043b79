"""Small builders and places shared by unit tests."""

import struct
from pathlib import Path

from profiler.kernel.events import WalkEnd
from profiler.model.profile import Frame, FrameKind, Profile, RunInfo, Sample

TESTS = Path(__file__).resolve().parent
DATA = TESTS / "data"
ROOT = TESTS.parent


def make_profile(stacks: list[tuple[str, int, list[Frame], int]], root_by_pid: bool = False) -> Profile:
    """stacks: (comm, pid, frames root first, repeat count)."""
    profile = Profile(RunInfo(["prog", "arg"], [1], 99, root_by_pid=root_by_pid))
    time_ns = 0
    for comm, pid, frames, repeat in stacks:
        ids = tuple(profile.intern(frame) for frame in frames)
        for _ in range(repeat):
            time_ns += 10_000_000
            profile.add(Sample(time_ns, pid, pid, comm, ids, WalkEnd.COMPLETE))
    return profile


def native(name: str, module: str = "prog") -> Frame:
    return Frame(name, module, FrameKind.NATIVE)


def kernel(name: str) -> Frame:
    return Frame(name, "[kernel]", FrameKind.KERNEL)


def read_uleb(data: bytes | bytearray, offset: int) -> tuple[int, int]:
    """An unsigned LEB128 (a protobuf varint, a DWARF ULEB) at offset: (value, the offset after it)."""
    value = shift = 0
    while True:
        byte = data[offset]
        offset += 1
        value |= (byte & 0x7F) << shift
        shift += 7
        if byte < 0x80:
            return value, offset


class LaidOutMemory:
    """A process's memory as a test lays it out (for readers of a runtime's objects)."""

    def __init__(self) -> None:
        self.blocks: dict[int, bytes] = {}
        self.reads = 0

    def put(self, address: int, data: bytes) -> None:
        self.blocks[address] = data

    def read(self, address: int, length: int) -> bytes | None:
        self.reads += 1
        for start, data in self.blocks.items():
            if start <= address and address + length <= start + len(data):
                return data[address - start : address - start + length]
        return None

    def word(self, address: int) -> int | None:
        data = self.read(address, 8)
        return struct.unpack("<Q", data)[0] if data is not None else None
