"""Turning a boolean -XX flag on in a running JVM, when the user asks: one
byte written into the JVM's own memory, where its table of flags says the
flag's value is, as async-profiler does from inside the process.

The address comes from the target's tables, so it is the target's word: the
byte is written only inside libjvm.so's own writable data (its file-backed
mappings, or the anonymous .bss right after them), through /proc/PID/mem of
the process whose tables were read (its start time checked around the open,
so a pid reused meanwhile is not written), and read back."""

from __future__ import annotations

import os

from profiler.kernel.proc_status import start_time
from profiler.kernel.procmaps import MapEntry, read_maps


def in_libjvm_data(maps: list[MapEntry], address: int) -> bool:
    """Is address in a writable mapping of libjvm.so, or in the anonymous one
    that follows its last mapping (its .bss past the file's end)?"""
    previous: MapEntry | None = None
    for entry in maps:
        if entry.start <= address < entry.end and entry.writable:
            if entry.is_file_backed and os.path.basename(entry.path) == "libjvm.so":
                return True
            return (
                not entry.path
                and previous is not None
                and previous.end == entry.start
                and os.path.basename(previous.path) == "libjvm.so"
            )
        previous = entry
    return False


def turn_on(pid: int, address: int) -> bool:
    """Write 1 to the bool at address in process pid: True once it reads 1."""
    started = start_time(pid)
    if started is None or not in_libjvm_data(read_maps(pid), address):
        return False
    try:
        descriptor = os.open(f"/proc/{pid}/mem", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        if start_time(pid) != started:
            return False  # another process has the pid now
        if os.pwrite(descriptor, b"\x01", address) != 1:
            return False
        return os.pread(descriptor, 1, address) == b"\x01"
    except OSError:
        return False
    finally:
        os.close(descriptor)
