from dataclasses import fields

from profiler.model.profile import LossCounts
from profiler.run.summary import loss_reasons


def test_no_loss_says_nothing():
    assert loss_reasons(LossCounts(kernel_stack_failed=3, process_events_lost=2)) == []


def test_each_kind_of_loss_says_why_with_its_count():
    lines = loss_reasons(LossCounts(ringbuf_full=1234, backlog_full=5, not_symbolised_in_time=7, malformed=1))
    assert len(lines) == 4
    full, backlog, late, malformed = lines
    assert "1,234 samples lost: the kernel's ring buffer was full" in full and "hint: a lower -F" in full
    assert "5 samples lost: too many waited to be named" in backlog
    assert "7 samples lost: not named in the time" in late
    assert "please report" in malformed


def test_every_kind_the_summary_counts_as_lost_is_explained():
    for kind in fields(LossCounts):
        losses = LossCounts(**{kind.name: 2})
        assert len(loss_reasons(losses)) == (1 if losses.lost_samples else 0), kind.name
