import pytest

from profiler.jit.rescan import RESCAN_FIRST_S, RESCAN_MAX_S, Rescan


def test_looks_less_often_while_nothing_turns_up_and_soon_again_after_a_find():
    rescan = Rescan()
    assert rescan.due(0.0)
    looks = [0.0]
    for _ in range(8):
        rescan.looked(looks[-1], found=False)
        assert not rescan.due(rescan.next_at - 0.01) and rescan.due(rescan.next_at)
        looks.append(rescan.next_at)
    assert looks[:5] == pytest.approx([0.0, RESCAN_FIRST_S, 0.6, 1.4, 1.4 + RESCAN_MAX_S])
    assert looks[-1] - looks[-2] == pytest.approx(RESCAN_MAX_S)  # and no longer apart than that
    rescan.looked(10.0, found=True)
    assert rescan.next_at == pytest.approx(10.0 + RESCAN_FIRST_S)
    rescan.looked(rescan.next_at, found=False)
    assert rescan.next_at == pytest.approx(10.0 + 2 * RESCAN_FIRST_S)  # and then backs off again
