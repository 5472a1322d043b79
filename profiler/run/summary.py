"""The end of a run as the user reads it: one summary line, then warnings."""

from __future__ import annotations

from dataclasses import dataclass, field

from profiler.kernel.mappings import MappingTracker
from profiler.model.profile import LossCounts, Profile
from profiler.native.unwind_tables import TableStats
from profiler.output import WrittenOutput
from profiler.safety.terminal import say
from profiler.symbolize.waits import duration_text


@dataclass
class Summary:
    """The run's one line at its end."""

    samples: int
    processes: int
    lost: int
    cut_short: dict[str, int]
    unsymbolized_share: float
    outputs: list[WrittenOutput] = field(default_factory=list)
    off_cpu: str = ""  # --off-cpu: what the waits came to

    @classmethod
    def of(cls, profile: Profile, written: list[WrittenOutput], processes: int | None = None) -> Summary:
        cut_short = {end.label: count for end, count in profile.walk_ends.items() if end.cut_short and count}
        return cls(
            samples=len(profile.samples) + profile.taken_samples,
            processes=len({sample.pid for sample in profile.samples}) if processes is None else processes,
            lost=profile.losses.lost_samples,
            cut_short=cut_short,
            unsymbolized_share=profile.unsymbolized_share(),
            outputs=written,
            off_cpu=off_cpu_text(profile) if profile.info.off_cpu else "",
        )

    def render(self) -> str:
        cut_total = sum(self.cut_short.values())
        cut_text = f"{cut_total:,} stacks cut short"
        if cut_total:
            reasons = ", ".join(f"{count:,} {reason}" for reason, count in sorted(self.cut_short.items()))
            cut_text += f" ({reasons})"
        written = [str(output.written) for output in self.outputs if output.written is not None]
        wrote = "wrote " + ", ".join(written) if written else "wrote nothing"
        return (
            f"jitprof: {self.samples:,} samples from {self.processes} process"
            f"{'es' if self.processes != 1 else ''}, {self.lost:,} lost; {cut_text}; "
            f"{100 * self.unsymbolized_share:.1f}% of frames unsymbolised; {self.off_cpu}{wrote}"
        )


def off_cpu_text(profile: Profile) -> str:
    """CPU and off-CPU time, the short waits summed, the idle left out."""
    period_ns = profile.info.sample_period_ns
    cpu_ns = waited_ns = waits = 0
    for sample in profile.samples:
        if sample.off_cpu_ns:
            waited_ns += sample.off_cpu_ns
            waits += 1
        else:
            cpu_ns += period_ns
    totals = profile.waits
    text = f"{cpu_ns / 1e9:,.2f} s on the CPU, {waited_ns / 1e9:,.2f} s off it"
    if totals.short_waits:
        text += f" ({totals.short_waits:,} waits under {duration_text(profile.info.shortest_wait_ns)}: {totals.short_ns / 1e9:,.2f} s)"
    if totals.runnable_ns >= waited_ns // 100 and totals.runnable_ns:
        text += f", {totals.runnable_ns / 1e9:,.2f} s of that runnable, waiting for a CPU"
    if totals.idle_ns and not profile.info.idle_kept:
        text += f", {totals.idle_ns / 1e9:,.2f} s idle left out (--idle keeps it)"
    if totals.untracked:
        text += f", {totals.untracked:,} waits not timed (the thread table was full)"
    if profile.waits_summed:
        text += (
            f", {profile.waits_summed:,} waits past the first {profile.separate_waits:,} added into earlier ones of the same thread "
            "and stack (their time kept, not their moments)"
        )
    return text + "; "


WARNING = "jitprof: warning: "


def warn(message: str) -> None:
    say(f"{WARNING}{message}")


def report_output_errors(outputs: list[WrittenOutput]) -> None:
    for output in outputs:
        if output.rescue:
            if output.written is not None:
                say(
                    f"jitprof: nothing collected is lost: the raw profile is in {output.written} "
                    f"(hint: jitprof report {output.written} -o FILE)"
                )
            else:
                warn("the raw profile could not be saved anywhere either (no writable directory)")
        elif output.error:
            where = f"wrote {output.written} instead" if output.written else "and no fallback was writable"
            warn(f"cannot write {output.requested}: {output.error}; {where}")


def loss_reasons(losses: LossCounts) -> list[str]:
    """Why the samples the summary counts as lost were lost, with what to do."""
    lines: list[str] = []
    if losses.ringbuf_full:
        lines.append(
            f"{WARNING}{losses.ringbuf_full:,} samples lost: the kernel's ring buffer was full (jitprof's reader fell "
            "behind, its CPU taken by other work); hint: a lower -F"
        )
    if losses.backlog_full:
        lines.append(
            f"{WARNING}{losses.backlog_full:,} samples lost: too many waited to be named (an event storm); "
            "hint: a lower -F, or --pid for the processes that matter"
        )
    if losses.not_symbolised_in_time:
        lines.append(
            f"{WARNING}{losses.not_symbolised_in_time:,} samples lost: not named in the time the run waits after sampling"
        )
    if losses.malformed:
        lines.append(f"jitprof: internal error: {losses.malformed:,} records of the kernel could not be read (please report)")
    return lines


def tracking_problems(
    tracker: MappingTracker, tables: TableStats | None, symbolizer_errors: list[str], naming_failures: dict[str, str]
) -> list[str]:
    """What made stacks end early or frames go unnamed, with what to do: the lines to say."""
    lines: list[str] = []

    def warning(message: str) -> None:
        lines.append(f"{WARNING}{message}")

    if tracker.stats.trie_rejected:
        warning(f"the mapping table was full; {tracker.stats.trie_rejected} ranges were not tracked and their stacks end early")
    unreadable = tracker.stats.unreadable_files
    for path, (pid, reason) in list(unreadable.items())[:3]:
        warning(f"not reading {path}, mapped by pid {pid} (its frames are unnamed, walked by frame pointers): {reason}")
    if len(unreadable) > 3:
        warning(f"and {len(unreadable) - 3} more mapped files were not read")
    if tables is not None:
        if tables.rejected_full:
            warning(
                f"the unwind row table is full ({tables.rows_capacity:,} rows); "
                f"{len(tables.rejected_full)} files use frame pointers only: {', '.join(list(tables.rejected_full)[:3])}"
            )
        for path, reason in list(tables.failed.items())[:3]:
            warning(f"no unwind table for {path}: {reason}")
    for path, reason in list(naming_failures.items())[:3]:
        warning(f"no source lines or inlined functions for {path} (named by its symbol table only): {reason}")
    if len(naming_failures) > 3:
        warning(f"and {len(naming_failures) - 3} more files blazesym could not read")
    for error in symbolizer_errors[:3]:
        lines.append(f"jitprof: internal error while symbolising (please report): {error}")
    return lines
