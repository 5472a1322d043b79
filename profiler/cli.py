"""Command line: `jitprof [options] -- COMMAND...` or `jitprof --pid PID`."""

from __future__ import annotations

import argparse
import errno
import os
import re
import resource
import sys
import threading
from pathlib import Path
from typing import IO

from profiler import __version__
from profiler.errors import JitprofError
from profiler.output import (
    EXTENSIONS,
    FORMATS,
    OutputRequest,
    UnknownFormat,
    WrittenOutput,
    format_for,
    write_path,
    write_text,
)
from profiler.push.defaults import DEFAULT_DIRECTORY, DEFAULT_MAX_BYTES
from profiler.run.options import DEFAULT_SHORTEST_WAIT_NS, PushOptions, RecordingOptions
from profiler.run.program_loading import ProgramLoading
from profiler.run.summary import report_output_errors
from profiler.safety import limits, scheduling
from profiler.safety.terminal import say
from profiler.safety.users import output_owner

DESCRIPTION = """\
Sample the CPU stacks of a program (native and JIT-compiled code) with eBPF
and write a flame graph. Needs root.

  sudo jitprof -- ./prog args...        spawn, profile until it exits
  sudo jitprof --pid 4242 -d 10         attach to a running process
  sudo jitprof --all -d 10              every process on the machine
  sudo jitprof --off-cpu --pid 4242     where its threads wait, too
  sudo jitprof --all --push http://pyroscope:4040
                                        profile continuously into Pyroscope
"""

EPILOG = f"""\
output formats (chosen by extension, or --format): {", ".join(f"{ext} ({name})" for ext, name in EXTENSIONS.items())}
exit status: the program's own (128+signal if it was killed); 0 with --pid;
1 when jitprof itself cannot run; 127 when the command is not found.
"""


GROUP_BY_HELP = (
    "split the outputs by a label's value: each stack under a root frame KEY=value (e.g. http.route, trace_id, "
    "service.name, or an attribute the process publishes)"
)
LABEL_HELP = "only samples with this label (repeatable: all of them), e.g. --label http.route=/checkout"
JS_ONLY_HELP = (
    "show the program's JavaScript only, as DevTools does: node's and V8's own frames are hidden and their "
    "time given to the JS function that called them; stacks without JS are (program) or (garbage collector)"
)


NO_SOURCE_MAPS_HELP = (
    "show JavaScript as the code that ran (dist/app.js:1, minified names), not as the sources its "
    "source maps name (src/app.ts:42, the names the author wrote)"
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jitprof",
        usage="jitprof [options] -- COMMAND [ARGS...]\n       jitprof [options] --pid PID [--pid PID...]\n"
        "       jitprof [options] --all [--push URL] [--otlp URL]\n"
        "       jitprof report PROFILE.jitprof [-o OUT...]\n       jitprof diff BASE.jitprof NEW.jitprof [-o diff.svg]",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"jitprof {__version__}")
    parser.add_argument(
        "-p",
        "--pid",
        type=int,
        action="append",
        default=[],
        metavar="PID",
        help="attach to a running process and all its threads (repeatable)",
    )
    parser.add_argument(
        "-F",
        "--frequency",
        type=int,
        default=99,
        metavar="HZ",
        help="samples per second per CPU (default: 99)",
    )
    parser.add_argument(
        "-d",
        "--duration",
        type=float,
        default=None,
        metavar="SECONDS",
        help="stop after this long; a spawned program is then stopped with SIGTERM (default: until it exits, or Ctrl-C)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="write the profile here, format from the extension (repeatable; default: jitprof-<pid>.svg)",
    )
    parser.add_argument(
        "--format",
        choices=sorted(FORMATS),
        default=None,
        help="format of every -o file, whatever its extension",
    )
    parser.add_argument(
        "--by-pid",
        action="store_true",
        help="one root frame per process (comm-PID) instead of per command name",
    )
    parser.add_argument(
        "--no-dwarf",
        action="store_true",
        help="walk stacks with frame pointers only (no .eh_frame unwinding): for comparison",
    )
    parser.add_argument("--kernel", action="store_true", help="include kernel stacks above the user stack")
    off_cpu = parser.add_argument_group(
        "time off the CPU",
        "where threads wait (a lock, a pipe, a sleep, a child, the disk), weighted by how long: "
        "stacks end in (off-CPU); a runtime's threads waiting for work end in (idle)",
    )
    off_cpu.add_argument(
        "--off-cpu", action="store_true", help="record every wait of a followed thread with its stack, beside the CPU samples"
    )
    off_cpu.add_argument(
        "--off-cpu-min",
        type=_duration_ns,
        default=DEFAULT_SHORTEST_WAIT_NS,
        metavar="TIME",
        help="waits shorter than this are summed per thread, not recorded one by one (default: 1ms; e.g. 200us, 5ms)",
    )
    off_cpu.add_argument(
        "--idle", action="store_true", help="keep the waits of threads waiting for work (event loops, pools' idle workers)"
    )
    parser.add_argument(
        "--no-tui",
        action="store_true",
        help="no live view: the program keeps the terminal (the view is on only when stdin and stdout are a terminal)",
    )
    parser.add_argument(
        "--no-inject",
        action="store_true",
        help="do not add the JIT flags to a spawned command (NODE_OPTIONS: --perf-basic-prof "
        "--interpreted-frames-native-stack, with --no-v8-heap the V8 code-log preload too; DENO_V8_FLAGS, "
        "BUN_JSC_useJITDump, JAVA_TOOL_OPTIONS, MVM_JIT_PERF_MAP)",
    )
    parser.add_argument(
        "--keep-jit-files",
        action="store_true",
        help="keep the perf maps, jitdumps and V8 code logs that the injected flags made the program write (default: removed at the end)",
    )
    parser.add_argument("--js-only", action="store_true", help=JS_ONLY_HELP + " (a .jitprof output keeps everything)")
    parser.add_argument("--group-by", metavar="KEY", help=GROUP_BY_HELP + " (a .jitprof output keeps the labels)")
    parser.add_argument(
        "--no-labels",
        action="store_true",
        help="do not label samples with the OpenTelemetry context processes publish (trace, span, route)",
    )
    parser.add_argument(
        "--label-store",
        metavar="FIELD",
        default="",
        help="label node samples with the AsyncLocalStorage store that has this field (e.g. tenant): its first "
        "three string and number fields, by name (node 24 on; 22 with --experimental-async-context-frame)",
    )
    parser.add_argument("--no-source-maps", action="store_true", help=NO_SOURCE_MAPS_HELP)
    parser.add_argument(
        "--no-debuginfod",
        action="store_true",
        help="do not ask the servers in DEBUGINFOD_URLS for the debug files of stripped binaries",
    )
    parser.add_argument(
        "--no-inline",
        action="store_true",
        help="count inlined code in its caller (JIT and native), as perf without --inline and --cpu-prof do",
    )
    parser.add_argument(
        "--jvm-debug-nonsafepoints",
        action="store_true",
        help="turn -XX:+DebugNonSafepoints on in JVMs running without it (one byte written into each JVM): the "
        "methods HotSpot compiles from then on name their inlined methods at every instruction; it stays on",
    )
    parser.add_argument(
        "--no-async",
        action="store_true",
        help="do not show the async functions awaiting a node sample's code ([async] frames; node 22 on)",
    )
    parser.add_argument(
        "--no-v8-heap",
        action="store_true",
        help="do not read V8's objects from node processes' memory: name JavaScript only from perf maps and V8's "
        "code log (a spawned node is then given the code log, which costs it 4-8 %% of its main thread)",
    )
    parser.add_argument("--user", metavar="NAME", help="run the command as this user (default: the sudo caller)")
    parser.add_argument("--as-root", action="store_true", help="run the command as root even under sudo")
    parser.add_argument(
        "-a",
        "--all",
        action="store_true",
        help="every process on the machine, as perf record -a: each is followed from its first sample; "
        "JIT code is named for runtimes started with their perf-map, jitdump or code-log flags",
    )
    push = parser.add_argument_group(
        "continuous profiling",
        "Send the profile of each application process every interval to a Pyroscope-compatible store "
        "(--push: POST /ingest, pprof), to an OpenTelemetry Collector or any OTLP profiles receiver "
        "(--otlp: POST /v1development/profiles, protobuf), or both. Credentials from the environment: "
        "JITPROF_PUSH_TOKEN (bearer), or JITPROF_PUSH_USER and JITPROF_PUSH_PASSWORD (basic); for --otlp also "
        "OTEL_EXPORTER_OTLP_HEADERS. Without -o, no files are written.",
    )
    push.add_argument("--push", metavar="URL", help="the store's base URL, e.g. http://pyroscope:4040")
    push.add_argument("--otlp", metavar="URL", help="the OTLP/HTTP receiver's base URL, e.g. http://otel-collector:4318")
    push.add_argument("--interval", type=float, default=None, metavar="SECONDS", help="seconds per profile (default: 15)")
    push.add_argument(
        "--app-name",
        metavar="NAME",
        help="the application name of every profile (default: per process, node's package or script, "
        "Java's main class or jar, else the command name)",
    )
    push.add_argument(
        "--tag",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a label on every profile (repeatable); hostname, pid and runtime are always there",
    )
    push.add_argument("--tenant", metavar="ID", help="the X-Scope-OrgID header, for a multi-tenant store")
    push.add_argument(
        "--spool-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"where profiles wait while the store is unreachable (default: {DEFAULT_DIRECTORY})",
    )
    push.add_argument(
        "--spool-max",
        type=float,
        default=None,
        metavar="MIB",
        help=f"the spool's size limit; the oldest go first (default: {DEFAULT_MAX_BYTES >> 20})",
    )
    return parser


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    """Options before the first `--`, the command after it."""
    if "--" in argv:
        index = argv.index("--")
        return argv[:index], argv[index + 1 :]
    return argv, []


def parse_options(argv: list[str]) -> RecordingOptions:
    parser = build_parser()
    option_args, command = split_command(argv)
    args = parser.parse_args(option_args)
    if command and args.pid:
        parser.error("give a command after -- or --pid, not both")
    if args.all and (command or args.pid):
        parser.error("--all profiles every process: give no command and no --pid with it")
    if not command and not args.pid and not args.all:
        parser.error("nothing to profile: give a command after --, --pid PID, or --all")
    if not 1 <= args.frequency <= 10000:
        parser.error("--frequency must be between 1 and 10000")
    if args.duration is not None and not (0 < args.duration < float("inf")):
        parser.error("--duration must be a positive number of seconds")
    if args.user and args.as_root:
        parser.error("--user and --as-root contradict each other")
    if args.idle and not args.off_cpu:
        parser.error("--idle keeps waits: give it with --off-cpu")
    try:
        outputs = [OutputRequest(path, format_for(path, args.format)) for path in args.output]
    except UnknownFormat as error:
        parser.error(str(error))
    push = _push_options(parser, args)
    return RecordingOptions(
        command=command,
        pids=args.pid,
        frequency_hz=args.frequency,
        duration_s=args.duration,
        outputs=outputs,
        kernel_stacks=args.kernel,
        root_by_pid=args.by_pid,
        dwarf=not args.no_dwarf,
        inject=not args.no_inject,
        keep_jit_files=args.keep_jit_files,
        inline=not args.no_inline,
        jvm_debug_non_safepoints=args.jvm_debug_nonsafepoints,
        group_by=args.group_by or "",
        labels=not args.no_labels,
        label_store=args.label_store,
        v8_heap=not args.no_v8_heap,
        async_callers=not args.no_async,
        js_only=args.js_only,
        source_maps=not args.no_source_maps,
        debuginfod=not args.no_debuginfod,
        live_view=not args.no_tui and push is None and sys.stdin.isatty() and sys.stdout.isatty(),
        user=args.user,
        as_root=args.as_root,
        all_processes=args.all,
        push=push,
        off_cpu=args.off_cpu,
        shortest_wait_ns=args.off_cpu_min,
        keep_idle=args.idle,
    )


DURATION_UNITS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def _duration_ns(text: str) -> int:
    """200us, 1ms, 0.5s, or a number of milliseconds: nanoseconds."""
    found = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|µs|ms|s)?\s*", text)
    if found is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration (e.g. 500us, 1ms, 0.2s)")
    nanoseconds = float(found.group(1)) * DURATION_UNITS[found.group(2) or "ms"]
    if not 0 <= nanoseconds <= 3600 * 1_000_000_000:
        raise argparse.ArgumentTypeError(f"{text!r} is not between 0 and an hour")
    return int(nanoseconds)


def _push_options(parser: argparse.ArgumentParser, args: argparse.Namespace) -> PushOptions | None:
    if args.push is None and args.otlp is None:
        given = [
            name
            for name, value in (
                ("--interval", args.interval),
                ("--app-name", args.app_name),
                ("--tag", args.tag),
                ("--tenant", args.tenant),
                ("--spool-dir", args.spool_dir),
                ("--spool-max", args.spool_max),
            )
            if value
        ]
        if given:
            parser.error(f"{', '.join(given)} only go with --push URL or --otlp URL")
        return None
    # Imported only for a push: they bring the runtimes' registry (0.1 s of every start).
    from profiler.push import ingest, otlp  # noqa: PLC0415
    from profiler.push.apps import LABEL_KEY, RESERVED_LABELS, label_name  # noqa: PLC0415
    from profiler.push.endpoint import BadEndpoint  # noqa: PLC0415

    for option, url, endpoint in (("--push", args.push, ingest.endpoint), ("--otlp", args.otlp, otlp.endpoint)):
        if url is not None:
            try:
                endpoint(url, args.tenant, dict(os.environ))
            except BadEndpoint as error:
                parser.error(f"{option} {error}")
    interval = 15.0 if args.interval is None else args.interval
    if not 1 <= interval <= 3600:
        parser.error("--interval must be between 1 and 3600 seconds")
    tags = []
    for text in args.tag:
        key, equals, value = text.partition("=")
        if not equals or not LABEL_KEY.match(key) or not value:
            parser.error(f"--tag {text!r}: give KEY=VALUE, the key letters, digits, _ and . (not first)")
        if key in RESERVED_LABELS or label_name(key) in RESERVED_LABELS:
            parser.error(f"--tag {key}=...: jitprof sets {key} itself")
        tags.append((key, value))
    spool_max = 64.0 if args.spool_max is None else args.spool_max
    if not 0 < spool_max <= 1 << 20:
        parser.error("--spool-max must be a positive number of MiB")
    return PushOptions(
        url=args.push,
        otlp_url=args.otlp,
        interval_s=interval,
        app_name=args.app_name,
        tags=tags,
        tenant=args.tenant,
        spool_dir=args.spool_dir or DEFAULT_DIRECTORY,
        spool_max_bytes=int(spool_max * (1 << 20)),
    )


def build_report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jitprof report",
        description="Write a saved profile (.jitprof) in other formats, or a part of it, without running anything again.",
        epilog="With no -o, the folded form is printed.",
    )
    parser.add_argument("profile", type=Path, metavar="PROFILE.jitprof")
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        action="append",
        default=[],
        metavar="PATH",
        help="write here, format from the extension (repeatable)",
    )
    parser.add_argument("--format", choices=sorted(FORMATS), default=None, help="format of every -o file")
    parser.add_argument("--pid", type=int, action="append", default=[], help="only samples of this process (repeatable)")
    parser.add_argument("--tid", type=int, action="append", default=[], help="only samples of this thread (repeatable)")
    parser.add_argument(
        "--since", type=float, default=None, metavar="SECONDS", help="only samples from this long after the first"
    )
    parser.add_argument(
        "--until", type=float, default=None, metavar="SECONDS", help="only samples before this long after the first"
    )
    parser.add_argument("--js-only", action="store_true", help=JS_ONLY_HELP)
    parser.add_argument("--group-by", metavar="KEY", help=GROUP_BY_HELP)
    parser.add_argument("--label", action="append", default=[], metavar="KEY=VALUE", help=LABEL_HELP)
    parser.add_argument("--no-source-maps", action="store_true", help=NO_SOURCE_MAPS_HELP)
    parser.add_argument(
        "--no-debuginfod",
        action="store_true",
        help="do not ask DEBUGINFOD_URLS for the debug files of functions the run left unnamed",
    )
    return parser


def build_diff_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jitprof diff",
        description="Compare two saved profiles: a differential flame graph, widths from NEW, "
        "red where NEW spent more CPU time than BASE, blue where less.",
        epilog="With no -o, the two-column folded form (stack, base count, new count) is printed.",
    )
    parser.add_argument("base", type=Path, metavar="BASE.jitprof")
    parser.add_argument("new", type=Path, metavar="NEW.jitprof")
    parser.add_argument(
        "-o", "--output", type=Path, default=None, metavar="PATH", help="write here: .svg, .html, or .folded/.txt"
    )
    parser.add_argument(
        "--format", choices=("svg", "html", "folded"), default=None, help="svg, html (a page to explore), or folded (two columns)"
    )
    parser.add_argument(
        "--normalize",
        action="store_true",
        help="scale BASE to NEW's total samples (compare shares), instead of comparing CPU time",
    )
    parser.add_argument("--no-source-maps", action="store_true", help=NO_SOURCE_MAPS_HELP)
    return parser


def _label_pairs(parser: argparse.ArgumentParser, given: list[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for text in given:
        key, equals, value = text.partition("=")
        if not equals or not key:
            parser.error(f"--label {text}: give KEY=VALUE (e.g. --label http.route=/checkout)")
        pairs.append((key, value))
    return tuple(pairs)


def run_report(argv: list[str]) -> int:
    from profiler.native import debuginfod  # noqa: PLC0415
    from profiler.output import report  # noqa: PLC0415  (a recording imports it as it writes)

    parser = build_report_parser()
    args = parser.parse_args(argv)
    try:
        outputs = [OutputRequest(path, format_for(path, args.format)) for path in args.output]
    except UnknownFormat as error:
        parser.error(str(error))
    selection = report.SampleFilter(
        frozenset(args.pid), frozenset(args.tid), args.since, args.until, _label_pairs(parser, args.label)
    )
    debuginfod.enabled = not args.no_debuginfod
    written = report.report(
        args.profile,
        outputs,
        selection,
        args.format or "folded",
        js_view=args.js_only,
        source_maps=not args.no_source_maps,
        group_by=args.group_by or "",
    )
    return _report_written(written)


def run_diff(argv: list[str]) -> int:
    from profiler.output import distinct_names, report  # noqa: PLC0415
    from profiler.output.originals import with_originals  # noqa: PLC0415

    parser = build_diff_parser()
    args = parser.parse_args(argv)
    format_name = args.format
    if format_name is None:
        suffix = args.output.suffix if args.output is not None else ""
        format_name = {".svg": "svg", ".html": "html"}.get(suffix, "folded")
    base, new = report.load(args.base), report.load(args.new)
    if not args.no_source_maps:
        base, new = with_originals(base), with_originals(new)
    # A function has one name on both sides, columns where either side needs them.
    shared = distinct_names.shared_names(base.frames, new.frames)
    base, new = distinct_names.with_distinct_names(base, shared), distinct_names.with_distinct_names(new, shared)
    if format_name == "folded" and args.output is None:
        report.write_diff_folded(base, new, sys.stdout, args.normalize)
        return 0
    if args.output is None:
        write_diff = report.write_diff_html if format_name == "html" else report.write_diff_svg
        write_diff(base, new, sys.stdout.buffer, args.normalize)
        return 0

    def produce(stream: IO[bytes]) -> None:
        if format_name == "svg":
            report.write_diff_svg(base, new, stream, args.normalize)
        elif format_name == "html":
            report.write_diff_html(base, new, stream, args.normalize)
        else:
            write_text(stream, lambda text: report.write_diff_folded(base, new, text, args.normalize))

    return _report_written([write_path(args.output, produce, output_owner(dict(os.environ)))])


def _report_written(written: list[WrittenOutput]) -> int:
    report_output_errors(written)
    names = [str(output.written) for output in written if output.written is not None]
    if names:
        say(f"jitprof: wrote {', '.join(names)}")
    return 0 if all(output.written is not None for output in written) else 1


SUBCOMMANDS = {"report": run_report, "diff": run_diff}


def entry() -> None:
    """The command (the `jitprof` script, `python -m profiler`): main(),
    then out without the interpreter's teardown. All a run must do at its
    end is done when main returns (outputs written and closed, helpers
    stopped, files removed, the kernel's objects let go); the teardown
    would free the profile's and the symbol tables' objects one by one,
    ~30 ms more before the user has the shell back. Threads that are not
    daemons are waited for, as the interpreter would. (Here, not in main:
    the process yields its CPU only as the command, not as a caller of main.)"""
    scheduling.yield_to_programs()
    code = main()
    for thread in threading.enumerate():
        if thread is not threading.current_thread() and not thread.daemon:
            thread.join()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe (`jitprof report | head`), or a closed stream
            pass
    os._exit(code)


def main(argv: list[str] | None = None) -> int:
    limits.load_thread_exit_library()
    limits.raise_own_limits()
    try:
        return _main(sys.argv[1:] if argv is None else argv)
    except (MemoryError, OSError, RuntimeError, ImportError, SystemError) as error:
        # Out of descriptors, memory or threads (often a limit the shell set)
        # is one line with the limit to raise; any other error here is a bug.
        # (A module's shared object that cannot be mapped is memory too, and
        # so is an extension module whose set-up failed to allocate under an
        # address-space limit: CPython says it returned an error without one.)
        if isinstance(error, RuntimeError) and str(error) != "can't start new thread":
            raise
        if isinstance(error, SystemError) and not (
            "without exception set" in str(error) and resource.getrlimit(resource.RLIMIT_AS)[0] != resource.RLIM_INFINITY
        ):
            raise
        if isinstance(error, ImportError) and not any(
            text in str(error).lower() for text in ("failed to map segment", "cannot allocate memory")
        ):
            raise
        limited = limits.describe_limits()
        errno_value = error.errno if isinstance(error, OSError) else errno.ENOMEM
        if errno_value not in (errno.EMFILE, errno.ENFILE, errno.ENOMEM) and not (limited and errno_value is None):
            raise
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error) or type(error).__name__
        if isinstance(error, SystemError):
            reason = os.strerror(errno.ENOMEM)
        say(f"jitprof: error: out of resources: {reason}" + (f" (hint: {limited}: raise it and run again)" if limited else ""))
        return 1


def _main(arguments: list[str]) -> int:
    if arguments and arguments[0] in SUBCOMMANDS:
        try:
            return SUBCOMMANDS[arguments[0]](arguments[1:])
        except JitprofError as error:
            say(error.render())
            return error.exit_code
        except BrokenPipeError:
            return 0  # `jitprof report x.jitprof | head`
    options = parse_options(arguments)
    try:
        # The sampler is verified by the kernel while the rest is imported.
        loading = ProgramLoading(options)
        from profiler.run.recording import Recording  # noqa: PLC0415

        return Recording(options, loading=loading).run()
    except JitprofError as error:
        say(error.render())
        return error.exit_code
    except KeyboardInterrupt:
        say("jitprof: interrupted before sampling started; nothing written")
        return 130
