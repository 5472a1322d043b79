import subprocess
import sys

import pytest

from profiler import __version__
from profiler.cli import build_parser, parse_options, split_command


def test_split_at_first_double_dash():
    assert split_command(["-F", "49", "--", "node", "--", "x"]) == (["-F", "49"], ["node", "--", "x"])
    assert split_command(["--pid", "3"]) == (["--pid", "3"], [])


def test_spawn_options():
    options = parse_options(["-F", "199", "-d", "2.5", "-o", "a.svg", "-o", "b.folded", "--kernel", "--", "prog", "-x"])
    assert options.command == ["prog", "-x"]
    assert options.frequency_hz == 199 and options.duration_s == 2.5 and options.kernel_stacks
    assert [(str(o.path), o.format_name) for o in options.outputs] == [("a.svg", "svg"), ("b.folded", "folded")]


def test_attach_options_and_format_override():
    options = parse_options(["--pid", "10", "-p", "11", "--format", "folded", "-o", "out.data"])
    assert options.pids == [10, 11] and options.command == []
    assert options.outputs[0].format_name == "folded"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--pid", "1", "--", "prog"],
        ["-F", "0", "--", "prog"],
        ["-d", "-1", "--", "prog"],
        ["-d", "nan", "--", "prog"],
        ["-d", "inf", "--", "prog"],
        ["-o", "x.unknown", "--", "prog"],
        ["--user", "bob", "--as-root", "--", "prog"],
        ["--all", "--", "prog"],
        ["--all", "--pid", "1"],
        ["--all", "--interval", "5"],
        ["--all", "--tag", "env=prod"],
        ["--all", "--push", "ftp://store"],
        ["--all", "--push", "http://user:pw@store"],
        ["--all", "--push", "http://store", "--interval", "0.5"],
        ["--all", "--push", "http://store", "--tag", "env"],
        ["--all", "--push", "http://store", "--tag", "9x=1"],
        ["--all", "--push", "http://store", "--tag", "pid=7"],
        ["--all", "--push", "http://store", "--spool-max", "0"],
        ["--idle", "--pid", "1"],
        ["--off-cpu", "--off-cpu-min", "soon", "--pid", "1"],
        ["--off-cpu", "--off-cpu-min", "2h", "--pid", "1"],
    ],
)
def test_usage_errors_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exit_info:
        parse_options(argv)
    assert exit_info.value.code == 2
    assert "jitprof: error:" in capsys.readouterr().err


def test_help_documents_every_flag(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for flag in (
        "--pid",
        "--frequency",
        "--duration",
        "--output",
        "--format",
        "--kernel",
        "--no-tui",
        "--user",
        "--as-root",
        "--by-pid",
        "--version",
        "--all",
        "--push",
        "--interval",
        "--app-name",
        "--tag",
        "--tenant",
        "--spool-dir",
        "--spool-max",
        "--off-cpu",
        "--off-cpu-min",
        "--idle",
    ):
        assert flag in text


def test_off_cpu_options():
    options = parse_options(["--off-cpu", "--idle", "--off-cpu-min", "250us", "--pid", "4"])
    assert options.off_cpu and options.keep_idle and options.shortest_wait_ns == 250_000
    assert parse_options(["--off-cpu", "--pid", "4"]).shortest_wait_ns == 1_000_000
    assert parse_options(["--off-cpu", "--off-cpu-min", "5", "--pid", "4"]).shortest_wait_ns == 5_000_000  # milliseconds
    assert not parse_options(["--pid", "4"]).off_cpu


def test_all_and_push_options():
    options = parse_options(
        [
            "--all",
            "--push",
            "https://store:4040",
            "--interval",
            "10",
            "--tag",
            "env=prod",
            "--tag",
            "team=pay",
            "--app-name",
            "shop",
            "--tenant",
            "t1",
            "--spool-dir",
            "/var/tmp/s",
            "--spool-max",
            "8",
        ]
    )
    assert options.all_processes and not options.command and not options.pids
    push = options.push
    assert push is not None and push.url == "https://store:4040" and push.interval_s == 10
    assert push.tags == [("env", "prod"), ("team", "pay")] and push.app_name == "shop" and push.tenant == "t1"
    assert str(push.spool_dir) == "/var/tmp/s" and push.spool_max_bytes == 8 << 20
    assert not options.live_view  # a pushing run logs instead
    assert parse_options(["--push", "http://store", "--", "node", "app.js"]).push.interval_s == 15


def test_version(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--version"])
    assert __version__ in capsys.readouterr().out


def test_a_module_that_cannot_be_mapped_under_a_limit_is_one_line(monkeypatch, capsys):
    """`ulimit -v` low enough that a module's shared object cannot be mapped
    while jitprof imports it: the limit to raise, not a traceback."""
    from profiler import cli
    from profiler.safety import limits

    def failing(_arguments):
        raise ImportError("/usr/lib/python3.11/lib-dynload/termios.so: failed to map segment from shared object")

    monkeypatch.setattr(cli, "_main", failing)
    monkeypatch.setattr(limits, "describe_limits", lambda: "address space limited to 48 MiB (ulimit -v)")
    assert cli.main(["--", "true"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1 and "out of resources" in lines[0] and "ulimit -v" in lines[0], lines

    def other(_arguments):
        raise ImportError("No module named 'nowhere'")

    monkeypatch.setattr(cli, "_main", other)
    with pytest.raises(ImportError):  # a bug: its traceback
        cli.main(["--", "true"])


def test_an_extension_that_fails_to_allocate_under_a_limit_is_one_line(monkeypatch, capsys):
    """An extension module whose set-up cannot allocate under `ulimit -v`
    makes CPython raise SystemError ("error return without exception set"):
    out of memory, said as such; without a memory limit it is a bug."""
    import resource

    from profiler import cli
    from profiler.safety import limits

    def failing(_arguments):
        raise SystemError("<built-in function load> returned NULL without exception set")

    monkeypatch.setattr(cli, "_main", failing)
    monkeypatch.setattr(limits, "raise_own_limits", lambda: None)  # it would keep the limit below as the original
    monkeypatch.setattr(limits, "describe_limits", lambda: "address space limited to 48 MiB (ulimit -v)")
    monkeypatch.setattr(resource, "getrlimit", lambda kind: (48 << 20, resource.RLIM_INFINITY))
    assert cli.main(["--", "true"]) == 1
    lines = [line for line in capsys.readouterr().err.splitlines() if line]
    assert len(lines) == 1 and "Cannot allocate memory" in lines[0] and "ulimit -v" in lines[0], lines

    monkeypatch.setattr(resource, "getrlimit", lambda kind: (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    with pytest.raises(SystemError):  # no memory limit: a bug, its traceback
        cli.main(["--", "true"])


def test_the_command_exits_with_mains_code_its_output_flushed_and_its_threads_done():
    # entry() leaves without the interpreter's teardown: nothing said or
    # started before is lost for it.
    script = (
        "import sys, threading, time\n"
        "import profiler.cli as cli\n"
        "def main():\n"
        "    worker = threading.Thread(target=lambda: (time.sleep(0.2), print('thread done', flush=False)))\n"
        "    worker.start()\n"
        "    sys.stdout.write('said ')\n"
        "    sys.stderr.write('warned')\n"
        "    return 3\n"
        "cli.main = main\n"
        "cli.entry()\n"
        "print('never')\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stdout == "said thread done\n" and done.stderr == "warned"
    version = subprocess.run([sys.executable, "-m", "profiler", "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and __version__ in version.stdout
