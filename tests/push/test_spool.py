"""The spool: bounded by bytes, oldest dropped first, kept across runs, and
only in a directory that is root's (the process owner's) alone."""

from __future__ import annotations

import os
import stat

import pytest

from profiler.push.spool import Spool, SpoolError


def test_oldest_dropped_first_and_counted(tmp_path):
    spool = Spool(tmp_path / "spool", max_bytes=3000)
    for index in range(5):
        assert spool.put({"name": f"app{index}.cpu{{}}"}, bytes(900))
    assert len(spool) == 3 and spool.size <= 3000
    assert spool.stats.dropped == 2
    first = spool.oldest()
    assert first is not None and first.query["name"] == "app2.cpu{}" and first.profile == bytes(900)
    spool.remove(first.name)
    assert [entry for entry in os.listdir(tmp_path / "spool")] == sorted(os.listdir(tmp_path / "spool"))
    assert len(os.listdir(tmp_path / "spool")) == 2
    spool.close()


def test_a_profile_bigger_than_the_spool_is_dropped(tmp_path):
    spool = Spool(tmp_path / "spool", max_bytes=1000)
    assert not spool.put({"name": "big"}, bytes(2000))
    assert spool.stats.dropped == 1 and len(spool) == 0


def test_kept_across_runs_in_order(tmp_path):
    first = Spool(tmp_path / "spool", max_bytes=1 << 20)
    for index in range(3):
        first.put({"name": f"n{index}"}, b"pprof%d" % index)
    first.close()
    (tmp_path / "spool" / ".new-000000000009.push").write_bytes(b"half written")
    (tmp_path / "spool" / "000000000004.push").write_bytes(b"no header line")
    second = Spool(tmp_path / "spool", max_bytes=1 << 20)
    names = []
    while (entry := second.oldest()) is not None:
        names.append((entry.query["name"], entry.profile))
        second.remove(entry.name)
    assert names == [("n0", b"pprof0"), ("n1", b"pprof1"), ("n2", b"pprof2")]  # the damaged one is dropped
    assert os.listdir(tmp_path / "spool") == []
    second.put({"name": "next"}, b"x")
    assert os.listdir(tmp_path / "spool") == ["000000000005.push"]  # numbering goes on


def test_created_private(tmp_path):
    Spool(tmp_path / "spool", max_bytes=1000).close()
    assert stat.S_IMODE(os.stat(tmp_path / "spool").st_mode) == 0o700


def test_refuses_a_directory_others_can_write(tmp_path):
    directory = tmp_path / "spool"
    directory.mkdir(mode=0o777)
    os.chmod(directory, 0o777)
    with pytest.raises(SpoolError, match="others can write in it"):
        Spool(directory, 1000)


def test_refuses_a_symlink(tmp_path):
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    os.symlink(tmp_path / "elsewhere", tmp_path / "spool")
    with pytest.raises(SpoolError, match="symbolic link"):
        Spool(tmp_path / "spool", 1000)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_refuses_another_users_directory(tmp_path):
    directory = tmp_path / "spool"
    directory.mkdir(mode=0o700)
    os.chown(directory, 65534, 65534)
    with pytest.raises(SpoolError, match="belongs to uid 65534"):
        Spool(directory, 1000)


def test_an_entry_replaced_by_a_link_is_not_read(tmp_path):
    spool = Spool(tmp_path / "spool", max_bytes=1 << 20)
    spool.put({"name": "a"}, b"1")
    spool.put({"name": "b"}, b"2")
    victim = tmp_path / "secret"
    victim.write_text('{"name": "stolen"}\nsecret')
    entry = tmp_path / "spool" / "000000000001.push"
    entry.unlink()
    os.symlink(victim, entry)
    found = spool.oldest()
    assert found is not None and found.query == {"name": "b"}
    assert victim.read_text().endswith("secret")  # not removed through the link either


@pytest.mark.skipif(os.geteuid() != 0, reason="the attack needs another user's directory")
def test_a_users_link_on_the_way_is_refused_and_nothing_is_created(tmp_path):
    """--spool-dir /tmp/mal/lnk/sub with lnk a user's link to a root-only
    directory: sub was created there, and the user could repoint lnk later."""
    target = tmp_path / "root-only"
    target.mkdir(mode=0o700)
    users = tmp_path / "mal"
    users.mkdir()
    os.chmod(tmp_path, 0o755)
    os.chown(users, 65534, 65534)
    os.symlink(target, users / "lnk")
    os.lchown(users / "lnk", 65534, 65534)
    with pytest.raises(SpoolError, match="uid 65534"):
        Spool(users / "lnk" / "sub", 1000)
    assert not (target / "sub").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="root's own links")
def test_a_roots_link_on_the_way_is_followed(tmp_path):
    """/var/run is root's link to /run: a spool under it is fine."""
    target = tmp_path / "real"
    target.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    os.symlink(target, tmp_path / "link")
    Spool(tmp_path / "link" / "spool", 1000).close()
    assert stat.S_IMODE(os.stat(target / "spool").st_mode) == 0o700
