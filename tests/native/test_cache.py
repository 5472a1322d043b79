"""The cache as a shared, root-written store: nobody else's file can stand in
for a system file's entry, what is read back is checked, and it stays bounded."""

import os
import stat
import struct

import pytest

from profiler.native import cache, elf, library
from profiler.native.unwind_rows import CfaType, RbpRule, UnwindRow, UnwindTable
from profiler.safety import files


def fake_stat(uid: int, mode: int, inode: int = 7) -> os.stat_result:
    return os.stat_result((mode, inode, 1, 1, uid, 0, 4096, 0, 0, 0))


def test_only_system_files_are_keyed_by_their_build_id():
    build_id = "ab" * 20
    assert elf.cache_key_for(build_id, fake_stat(0, stat.S_IFREG | 0o755)) == f"b-{build_id}"
    # The same build-id in a user's file, or in a file others can write: keyed by identity.
    users = elf.cache_key_for(build_id, fake_stat(1000, stat.S_IFREG | 0o755))
    writable = elf.cache_key_for(build_id, fake_stat(0, stat.S_IFREG | 0o775, inode=9))
    assert users.startswith("f-") and writable.startswith("f-") and users != writable
    assert elf.cache_key_for(build_id, fake_stat(1000, stat.S_IFREG | 0o755, inode=8)) != users


def test_a_users_copy_of_libc_does_not_share_libcs_entry(tmp_path):
    libc = "/lib/x86_64-linux-gnu/libc.so.6"
    copy = tmp_path / "libc.so.6"
    copy.write_bytes(open(libc, "rb").read())
    os.chmod(copy, 0o666)  # as root the copy is root's: writable by others, it is still not a system file
    system, users = elf.open_elf([libc], libc), elf.open_elf([str(copy)], str(copy))
    try:
        assert system.build_id == users.build_id and system.cache_key.startswith("b-")
        assert users.cache_key != system.cache_key
    finally:
        system.close()
        users.close()


def rows(*items: UnwindRow) -> bytes:
    return UnwindTable(list(items)).pack()


def test_forged_rows_are_refused():
    good = rows(
        UnwindRow(0x1000, CfaType.RSP, 8), UnwindRow(0x1004, CfaType.RBP, 16, RbpRule.OFFSET, -16), UnwindRow(0x1010, CfaType.GAP)
    )
    cache.store_cached("b-11", good)
    assert cache.load_cached("b-11") == good
    unsorted = rows(UnwindRow(0x2000, CfaType.RSP, 8), UnwindRow(0x1000, CfaType.RSP, 8))
    repeated = rows(UnwindRow(0x1000, CfaType.RSP, 8), UnwindRow(0x1000, CfaType.RBP, 16))
    bad_plt = rows(UnwindRow(0x1000, CfaType.PLT, 99))
    unknown_type = bytearray(good)
    unknown_type[4] = 9
    reserved = bytearray(good)
    reserved[6] = 1
    for key, forged in (
        ("b-12", unsorted),
        ("b-13", repeated),
        ("b-14", bad_plt),
        ("b-15", bytes(unknown_type)),
        ("b-16", bytes(reserved)),
    ):
        cache.store_cached(key, forged)
        assert cache.load_cached(key) is None, key
    assert library.rows_valid(b"") and not library.rows_valid(good[:-1])


def test_damaged_symbol_entries_are_refused_without_allocating_their_claims(tmp_path):
    path = cache.entry_path("symbols", "b-21", ".syms")
    assert path is not None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(cache.HEADER.pack(cache.MAGIC, 1 << 60, 0))  # claims 2^64 bytes of starts
    assert cache.load("b-21") is None
    unsorted = struct.pack("<QQ", 0x2000, 0x1000) + struct.pack("<QQ", 16, 16) + b"b\0a"
    path.write_bytes(cache.HEADER.pack(cache.MAGIC, 2, 3) + unsorted)
    assert cache.load("b-21") is None
    ordered = struct.pack("<QQ", 0x1000, 0x2000) + struct.pack("<QQ", 16, 16) + b"a\0b"
    path.write_bytes(cache.HEADER.pack(cache.MAGIC, 2, 3) + ordered)
    assert cache.load("b-21").names == ["a", "b"]


def test_an_entry_that_is_a_link_is_not_followed(tmp_path):
    elsewhere = tmp_path / "elsewhere.rows"
    elsewhere.write_bytes(cache.UNWIND_MAGIC + rows(UnwindRow(0x1000, CfaType.RSP, 8)))
    path = cache.entry_path("unwind", "b-31", ".rows")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(elsewhere)
    assert cache.load_cached("b-31") is None


def test_json_entries_come_back_or_not_at_all(tmp_path):
    cache.write_json("kind", "f-41", {"starts": [1, 2], "names": ["a"]})
    assert cache.read_json("kind", "f-41", 1024) == {"starts": [1, 2], "names": ["a"]}
    assert cache.read_json("kind", "f-41", 10) is None  # over its caller's cap
    assert cache.read_json("kind", "f-42", 1024) is None  # no entry
    assert cache.read_json("kind", "../f-41", 1024) is None  # not a key of ours
    path = cache.entry_path("kind", "f-41", ".json")
    path.write_bytes(b'{"starts": [1, ')
    assert cache.read_json("kind", "f-41", 1024) is None
    path.write_bytes(b"[" * 100_000 + b"]" * 100_000)
    assert cache.read_json("kind", "f-41", 1 << 20) is None  # deeper than the parser goes
    path.unlink()
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_bytes(b"[1]")
    path.symlink_to(elsewhere)
    assert cache.read_json("kind", "f-41", 1024) is None


def test_least_recently_used_entries_are_evicted(tmp_path):
    directory = tmp_path / "kind"
    directory.mkdir()
    for index in range(6):
        entry = directory / f"b-{index}.rows"
        entry.write_bytes(b"x" * 10)
        os.utime(entry, ns=(index * 10**9, index * 10**9))
    assert cache.evict(directory, max_entries=4) == 2
    assert sorted(path.name for path in directory.iterdir()) == [f"b-{index}.rows" for index in range(2, 6)]
    assert cache.evict(directory, max_entries=10, max_bytes=25) == 2


@pytest.mark.skipif(os.geteuid() != 0, reason="the rules for a root cache")
def test_as_root_a_cache_dir_another_user_can_change_is_ignored(tmp_path, monkeypatch, capsys):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)  # anyone could plant entries here
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(shared))
    assert cache.cache_dir() == cache.Path("/var/cache/jitprof")
    assert "not root's alone" in capsys.readouterr().err
    users = tmp_path / "users"
    users.mkdir()
    os.chown(users, 65534, 65534)
    assert not files.root_only(users)
    inside = tmp_path / "private"
    inside.mkdir(mode=0o700)
    assert files.root_only(inside)
    monkeypatch.setenv("JITPROF_CACHE_DIR", str(inside))
    assert cache.cache_dir() == inside
