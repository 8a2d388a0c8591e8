"""A stalled engine (requests in flight, no token for 30 s) is no load to learn from: the default window avoids it."""

from __future__ import annotations

from kvdoctor.whatif.breaks import stalls
from kvdoctor.whatif.sources import RAMP_S, default_window
from kvdoctor.whatif.window import Snap


def _scrapes(stalled: tuple[float, float], end: float) -> list[Snap]:
    """Four requests in flight every second from 0 to end; tokens stop moving over `stalled` (from, to)."""
    out, tokens = [], 0.0
    for t in range(int(end) + 1):
        if not stalled[0] < t <= stalled[1]:
            tokens += 400.0
        flat = {
            "vllm:num_requests_running": 4.0,
            "vllm:num_requests_waiting": 0.0,
            "vllm:generation_tokens_total": tokens,
        }
        out.append(Snap(float(t), flat))
    return out


def test_a_stall_with_a_level_after_it_starts_the_window_where_tokens_moved_again() -> None:
    snaps = _scrapes((100.0, 160.0), 400.0)
    [(a, b)] = stalls(snaps)
    assert (snaps[a].t, snaps[b].t) == (100.0, 161.0)
    lo, hi = default_window(snaps)
    assert (lo, hi) == (161.0 + RAMP_S, 400.0)


def test_a_stall_at_the_end_or_with_too_little_after_it_ends_the_window_where_it_began() -> None:
    still_stalled = _scrapes((100.0, 200.0), 200.0)
    fifteen_after = _scrapes((100.0, 160.0), 175.0)  # 15 s of load after it: too short to be a level
    for snaps in (still_stalled, fifteen_after):
        assert default_window(snaps)[1] == 100.0


def test_a_pause_shorter_than_the_pack_s_thirty_seconds_is_not_a_stall() -> None:
    assert stalls(_scrapes((100.0, 128.0), 300.0)) == []
    assert default_window(_scrapes((100.0, 128.0), 300.0))[1] == 300.0
