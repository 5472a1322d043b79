"""Outputs as root for a sudo caller: written as the caller would be allowed
to, existing files replaced (never truncated or re-owned), failures leave no
partial file, one failure never stops the others, and nothing collected is lost."""

import errno
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path

import pytest

from profiler.output import OutputRequest, write_outputs, write_path
from profiler.safety.users import RunAs
from tests.helpers import make_profile, native

NOBODY = RunAs(65534, 65534, [65534], "nobody", "/")
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="writes on behalf of another user need root")


def profile():
    return make_profile([("prog", 1, [native("main"), native("work")], 5)])


def text_producer(text: bytes):
    return lambda stream: stream.write(text)


@pytest.fixture
def shared_tmp():
    """A directory the caller can reach (pytest's own is root's alone)."""
    directory = Path(tempfile.mkdtemp(prefix="jitprof-test-", dir="/tmp"))
    os.chmod(directory, 0o755)
    yield directory
    shutil.rmtree(directory)


@pytest.fixture
def caller_dir(shared_tmp, monkeypatch):
    directory = shared_tmp / "caller"
    directory.mkdir()
    if os.geteuid() == 0:
        os.chown(directory, NOBODY.uid, NOBODY.gid)
    monkeypatch.chdir(directory)
    return directory


@as_root
def test_a_root_file_is_neither_truncated_nor_given_away(shared_tmp, caller_dir):
    root_dir = shared_tmp / "roots"
    root_dir.mkdir(mode=0o755)
    precious = root_dir / "precious.svg"
    precious.write_text("root's data")
    written = write_path(precious, text_producer(b"<svg/>"), NOBODY)
    assert precious.read_text() == "root's data" and precious.stat().st_uid == 0
    assert written.written is not None and written.written.parent == caller_dir
    assert written.written.stat().st_uid == NOBODY.uid and "ermission denied" in written.error


@as_root
def test_nothing_is_created_where_the_caller_cannot_write(shared_tmp, caller_dir):
    root_dir = shared_tmp / "etc-like"
    root_dir.mkdir(mode=0o755)
    written = write_path(root_dir / "new.svg", text_producer(b"<svg/>"), NOBODY)
    assert list(root_dir.iterdir()) == []
    assert written.written is not None and written.written.parent == caller_dir


@as_root
def test_the_callers_own_file_is_replaced_by_a_new_one_of_theirs(caller_dir):
    mine = caller_dir / "out.folded"
    mine.write_text("old")
    os.chown(mine, NOBODY.uid, NOBODY.gid)
    old_inode = mine.stat().st_ino
    written = write_path(mine, text_producer(b"new"), NOBODY)
    assert written.written == mine and mine.read_text() == "new"
    info = mine.stat()
    assert info.st_uid == NOBODY.uid and info.st_ino != old_inode and stat.S_IMODE(info.st_mode) == 0o644


def test_a_failed_write_leaves_no_partial_file_and_the_others_are_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import profiler.output as output

    def full_disk(_profile, stream):
        stream.write(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setitem(output._loaded_writers, "svg", full_disk)
    written = write_outputs(
        profile(), [OutputRequest(tmp_path / "a.svg", "svg"), OutputRequest(tmp_path / "a.folded", "folded")], None
    )
    assert written[0].written is None and "No space left" in written[0].error
    assert written[1].written == tmp_path / "a.folded" and "work" in (tmp_path / "a.folded").read_text()
    rescue = written[2]
    assert rescue.rescue and rescue.written is not None and rescue.written.name.endswith("profile.jitprof")
    leftovers = [path.name for path in tmp_path.iterdir() if "svg" in path.name]
    assert leftovers == []


def test_a_fifo_without_a_reader_is_an_error_not_a_wait(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    fifo = tmp_path / "pipe.folded"
    os.mkfifo(fifo)
    result = {}
    writer = threading.Thread(target=lambda: result.update(written=write_path(fifo, text_producer(b"x"), None)))
    writer.start()
    writer.join(5)
    assert not writer.is_alive()
    assert result["written"].written is not None and result["written"].written != fifo


def test_a_symlink_at_the_output_path_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "target"
    target.write_text("keep")
    link = tmp_path / "out.svg"
    link.symlink_to(target)
    written = write_path(link, text_producer(b"x"), None)
    assert target.read_text() == "keep" and link.is_symlink() and "symbolic link" in written.error


def test_control_characters_in_names_keep_the_svg_valid_xml():
    import io
    import xml.etree.ElementTree as ElementTree

    from profiler.output import render

    hostile = make_profile([("prog\x07", 1, [native("main"), native("odd\x01name\x1b[31m"), native("lone \ud800 surrogate")], 3)])
    svg = render(hostile, "svg")
    root = ElementTree.parse(io.BytesIO(svg)).getroot()
    texts = "".join(root.itertext())
    assert "odd\ufffdname\ufffd[31m" in texts and "\x01" not in texts
