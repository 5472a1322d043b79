"""The ELF files behind followed processes' executable mappings, opened once
per file (by device and inode) while a process maps them, and kept until no
mapping holds them: symbols and unwind tables outlive the process.

Called with the tracker's lock held; not thread-safe on its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from profiler.kernel.procmaps import MapEntry
from profiler.native.elf import ElfImage, UnreadableElf, open_elf, vdso_image
from profiler.native.heap import give_back_freed_memory

VDSO = "[vdso]"
MAX_UNREADABLE_KEPT = 100  # unusable files named at the end of a run
MAX_UNUSABLE_FILES = 1 << 16  # files remembered as unusable (then forgotten, and tried again)


@dataclass(frozen=True)
class FileKey:
    """A file by device and inode."""

    device: str
    inode: int


def has_image(entry: MapEntry) -> bool:
    """Is there an ELF file behind this mapping (a file, or the vDSO)?"""
    return entry.is_file_backed or entry.path == VDSO


class FileImages:
    def __init__(self) -> None:
        self._images: dict[FileKey, ElfImage] = {}
        self._unusable: set[FileKey] = set()  # opened, and no ELF jitprof can read
        self._vdso: ElfImage | None | bool = False  # False: not read yet
        self.unreadable: dict[str, tuple[int, str]] = {}  # path: (a pid mapping it, why)

    def known(self, entry: MapEntry) -> ElfImage | None:
        """The image of a mapping's file if it is open already."""
        return self._images.get(FileKey(entry.device, entry.inode))

    def image_for(self, pid: int, entry: MapEntry) -> ElfImage | None:
        """The mapping's file, opened while pid is alive (its map_files entry
        goes with it); None for a file jitprof cannot use."""
        if entry.is_jitdump_marker:  # mapped executable for profilers to find, not code
            return None
        if entry.path == VDSO:  # the same kernel's vDSO in every process
            if self._vdso is False:
                self._vdso = vdso_image()
            return self._vdso if isinstance(self._vdso, ElfImage) else None
        key = FileKey(entry.device, entry.inode)
        image = self._images.get(key)
        if image is not None or key in self._unusable:
            return image
        # map_files reaches the exact mapped file, even deleted or in another
        # mount namespace; /proc/PID/root is the container-aware fallback.
        candidates = [f"/proc/{pid}/map_files/{entry.start:x}-{entry.end:x}", f"/proc/{pid}/root{entry.path}"]
        try:
            image = open_elf(candidates, entry.path, root=f"/proc/{pid}/root")
        except UnreadableElf as error:
            # Only a file that opened and is unusable is given up on: a failed
            # open is often its process exiting, and another process mapping
            # the same file (libc) must still get its symbols and table.
            if error.opened:
                if len(self._unusable) >= MAX_UNUSABLE_FILES:
                    self._unusable.clear()
                self._unusable.add(key)
                if len(self.unreadable) < MAX_UNREADABLE_KEPT:
                    self.unreadable[entry.path] = (pid, str(error))
            return None
        self._images[key] = image
        return image

    def prune(self, held: set[int], keep: Callable[[ElfImage], bool]) -> None:
        """Close the images whose id() is not in held, unless keep(image)."""
        closed = 0
        for key, image in list(self._images.items()):
            if id(image) in held or keep(image):
                continue
            del self._images[key]
            image.close()
            closed += 1
        if closed:
            give_back_freed_memory()

    def close(self) -> None:
        for image in self._images.values():
            image.close()
        self._images.clear()
        if isinstance(self._vdso, ElfImage):
            self._vdso.close()
        self._vdso = False
