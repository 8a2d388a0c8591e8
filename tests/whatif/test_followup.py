"""A restart's follow-up, as a look decides it: what needs no simulation is answered where it is asked, so the
advisor's worker queue holds only follow-ups that simulate, with or without a simulation child."""

from __future__ import annotations

from pathlib import Path

import pytest

from kvdoctor.ingest.parse import Parser
from kvdoctor.ingest.recording import load_frames
from kvdoctor.whatif import followup
from kvdoctor.whatif.breaks import restarts
from kvdoctor.whatif.sharing import Simulate
from kvdoctor.whatif.window import Snap, snapshot

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"


def _history(paths: list[Path]) -> tuple[list[Snap], float]:
    """The snapshots of these recordings played end to end at 1 s (each a new engine), and the last restart's time."""
    parser, snaps = Parser(), []
    for path in paths:
        for f in load_frames(path):
            if f.text is not None:
                snaps.append(snapshot(len(snaps) + 1.0, parser.parse(f.text).samples))
    cuts = restarts(snaps)
    assert cuts, "no restart in the history"
    return snaps, snaps[cuts[-1]].t


def test_a_restart_with_the_same_configuration_is_answered_by_the_look_itself():
    history, restart = _history([PAIRS / "kv2x_before.jsonl.gz"] * 2)  # a replay's loop: nothing changed
    assert history[-1].t - restart > followup.RAMP_S + followup.SETTLE_S  # settled: only the case says no
    assert followup.checked("x", history, restart, None, simulate=False) is None


def test_a_restart_with_a_changed_flag_needs_the_worker_once_settled_and_not_before():
    history, restart = _history([PAIRS / "batchcap_restart.jsonl.gz"])
    early = [s for s in history if s.t < restart + followup.RAMP_S + 5.0]
    assert followup.checked("x", early, restart, None, simulate=False) is None
    with pytest.raises(Simulate):
        followup.checked("x", history, restart, None, simulate=False)


def test_a_batch_capped_server_restarted_with_the_same_cap_is_not_a_change():
    # its history before the restart holds the ramp up to the cap: the cap is the steady window's plateau, not a
    # new one that the steady load after the restart shows
    history, restart = _history([PAIRS / "batchcap_before.jsonl.gz"] * 2)
    assert followup.case(history, restart) is None
    assert followup.follow_up("x", history, restart) is None
    changed, at = _history([PAIRS / "batchcap_restart.jsonl.gz"])  # cap 4 -> 12
    made = followup.case(changed, at)
    assert made is not None and made.change == {"max_num_seqs": 12}
