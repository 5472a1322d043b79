"""The records' methods from code set-up compiled: the same classes as
dataclasses makes, the table used only when it can be trusted, and set-up's
table covering every record a start makes."""

from __future__ import annotations

import dataclasses
import marshal
import os
import subprocess
import sys
from pathlib import Path

import pytest

from profiler.native import dataclass_code

ROOT = Path(__file__).resolve().parents[2]

RECORDS = '''
from __future__ import annotations
import dataclasses

@dataclasses.dataclass(frozen=True, order=True)
class Point:
    """A frozen, ordered record with defaults."""
    x: int
    y: int = 0
    tags: tuple[str, ...] = ()

@dataclasses.dataclass
class Bag:
    """A mutable one with a factory and a keyword-only field."""
    items: list[int] = dataclasses.field(default_factory=list)
    name: str = dataclasses.field(default="bag", kw_only=True)
'''


def make_records() -> dict[str, object]:
    namespace: dict[str, object] = {"__name__": "records_under_test"}
    sys.modules["records_under_test"] = type(sys)("records_under_test")
    sys.modules["records_under_test"].__dict__.update(namespace)
    try:
        exec(compile(RECORDS, "records_under_test", "exec"), sys.modules["records_under_test"].__dict__)  # noqa: S102
        return dict(sys.modules["records_under_test"].__dict__)
    finally:
        del sys.modules["records_under_test"]


def check_behaviour(records: dict[str, object]) -> None:
    point, bag = records["Point"], records["Bag"]
    first = point(1, 2, ("a",))  # type: ignore[operator]
    assert first == point(1, 2, ("a",)) and hash(first) == hash(point(1, 2, ("a",)))  # type: ignore[operator]
    assert point(1) < point(2) and point(1).y == 0  # type: ignore[operator]
    assert repr(first) == "Point(x=1, y=2, tags=('a',))"
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.x = 3  # type: ignore[attr-defined]
    one, other = bag(), bag(name="b")  # type: ignore[operator]
    one.items.append(1)
    assert other.items == [] and other.name == "b" and one != other
    with pytest.raises(TypeError):
        bag([], "positional")  # type: ignore[operator]


@pytest.fixture
def table(tmp_path, monkeypatch):
    """A table of the test's records' texts, written as set-up writes one."""
    recorded: dict[bytes, object] = {}
    monkeypatch.setattr(dataclass_code, "_kept", {})
    monkeypatch.setattr(dataclass_code, "_recording", recorded)
    make_records()
    monkeypatch.setattr(dataclass_code, "_recording", None)
    path = tmp_path / "dataclass-code.marshal"
    path.write_bytes(dataclass_code._HEADER + marshal.dumps(recorded))
    path.chmod(0o644)
    return path, recorded


def test_records_made_from_the_table_behave_as_dataclasses_makes_them(table, monkeypatch):
    path, recorded = table
    assert len(recorded) >= 8  # each class's __init__, __repr__, __eq__; Point's order, hash, frozen attributes
    assert dataclass_code.install(path) == len(recorded)
    before = dataclass_code.compiled_here
    check_behaviour(make_records())
    assert dataclass_code.compiled_here == before  # every text from the table
    monkeypatch.setattr(dataclass_code, "_kept", {})
    check_behaviour(make_records())  # and compiled here, the same
    assert dataclass_code.compiled_here > before


def test_the_tables_code_is_what_runs(table, monkeypatch):
    path, recorded = table
    kept = dataclass_code._read_table(path)
    made = {
        key: [const.co_name for const in code.co_consts[0].co_consts if hasattr(const, "co_name")] for key, code in kept.items()
    }
    repr_key = next(key for key, names in made.items() if names == ["__repr__"])
    changed = compile(
        "def __create_fn__():\n def __repr__(self):\n  return 'from the table'\n return __repr__", "<string>", "exec"
    )
    monkeypatch.setattr(dataclass_code, "_kept", {**kept, repr_key: changed})
    records = make_records()
    assert "from the table" in {repr(records["Point"](1)), repr(records["Bag"]())}  # type: ignore[operator]


def test_a_table_others_can_change_or_of_another_python_is_not_run(table, monkeypatch):
    path, recorded = table
    monkeypatch.setattr(dataclass_code, "_kept", {})
    path.chmod(0o666)
    assert dataclass_code.install(path) == 0
    path.chmod(0o644)
    link = path.with_name("link.marshal")
    link.symlink_to(path)
    assert dataclass_code.install(link) == 0
    path.write_bytes(dataclass_code._HEADER[:-4] + b"\0\0\0\0" + marshal.dumps(recorded))
    assert dataclass_code.install(path) == 0
    path.write_bytes(dataclass_code._HEADER + b"\xff not marshal")
    assert dataclass_code.install(path) == 0
    assert dataclasses.exec is dataclass_code._exec  # type: ignore[attr-defined]  # compiled as before
    check_behaviour(make_records())


def test_set_ups_table_holds_every_record_a_start_makes(tmp_path):
    """Set-up's command writes a table; a start's imports then compile nothing."""
    table = tmp_path / "build" / "dataclass-code.marshal"
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    write = (
        f"from pathlib import Path; from profiler.native import dataclass_code; dataclass_code.write_table(Path({str(table)!r}))"
    )
    subprocess.run([sys.executable, "-c", write], check=True, env=environment, cwd=tmp_path)
    start = (
        "from pathlib import Path; import sys; from profiler.native import dataclass_code; "
        f"kept = dataclass_code.install(Path({str(table)!r})); "
        "import profiler.cli, profiler.run.recording, profiler.symbolize.symbolizer; "
        "print(kept, dataclass_code.compiled_here)"
    )
    answer = subprocess.run(
        [sys.executable, "-c", start], check=True, env=environment, cwd=tmp_path, capture_output=True, text=True
    )
    kept, compiled_here = map(int, answer.stdout.split())
    assert kept > 500 and compiled_here == 0


def test_the_table_is_stale_once_a_module_is_newer(tmp_path):
    table = tmp_path / "dataclass-code.marshal"
    assert dataclass_code.stale(table)  # none yet
    table.write_bytes(b"")
    newest = max(module.stat().st_mtime for module in (ROOT / "profiler").rglob("*.py"))
    os.utime(table, (newest + 1, newest + 1))
    assert not dataclass_code.stale(table)
    os.utime(table, (newest - 1, newest - 1))
    assert dataclass_code.stale(table)
