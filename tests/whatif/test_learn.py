"""A window is learned once: every change's prediction and every headroom probe reuse it, and predict the same."""

from __future__ import annotations

import json
import pickle
import threading
import weakref
from collections import OrderedDict
from dataclasses import replace
from pathlib import Path

import pytest

from kvdoctor.whatif import learn as learn_module
from kvdoctor.whatif import plan as plan_module
from kvdoctor.whatif.headroom import search
from kvdoctor.whatif.learn import Basis
from kvdoctor.whatif.plan import Planner
from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sources import default_window, recording_snaps
from kvdoctor.whatif.window import Snap, in_window

BATCHCAP = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif/batchcap_before.jsonl.gz"
CHANGES: list[dict[str, float | str]] = [{"max_num_seqs": 8}, {"kv_cache_tokens": 65536}, {"replicas": 2}]


def _window() -> tuple[list[Snap], list[Snap]]:
    snaps = recording_snaps(BATCHCAP)  # --max-num-seqs 4 with a queue: a closed loop at its cap
    window = in_window(snaps, *default_window(snaps))
    return [s for s in snaps if s.t <= window[-1].t], window


@pytest.fixture
def learnings(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the windows this test's thread actually learned (a step-model fit and an unchanged run each), from an
    empty cache. A worker thread an earlier test left running in this process may learn its own windows meanwhile:
    not counted, and too few to push this test's out of a cache this large."""
    calls: list[int] = []
    real, mine = learn_module.learn, threading.current_thread()

    def counted(*args: object, **kwargs: object) -> Basis:
        if threading.current_thread() is mine:
            calls.append(1)
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(learn_module, "_cache", OrderedDict())
    monkeypatch.setattr(learn_module, "LEARNED", 64)
    monkeypatch.setattr(learn_module, "learn", counted)
    return calls


@pytest.mark.slow  # four learnings and a dozen simulations
def test_every_change_of_a_window_is_predicted_from_one_learning_exactly_as_from_a_fresh_one(
    learnings: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    history, window = _window()
    shared = [predict(history, window, change).to_dict() for change in CHANGES]
    assert len(learnings) == 1
    monkeypatch.setattr(learn_module, "_cache", OrderedDict())
    monkeypatch.setattr(learn_module, "LEARNED", 0)  # nothing kept: each prediction learns the window afresh
    fresh = [predict(history, window, change).to_dict() for change in reversed(CHANGES)][::-1]
    assert len(learnings) == 1 + len(CHANGES)
    assert json.dumps(shared) == json.dumps(fresh)  # the same numbers, to the last bit
    assert shared[0]["predicted"] != shared[2]["predicted"]  # … and each change still its own answer


def test_another_window_or_cap_is_learned_on_its_own(learnings: list[int]) -> None:
    history, window = _window()
    predict(history, window, CHANGES[0])
    predict(history, window[1:], CHANGES[0])
    predict(history, window, CHANGES[0], max_num_seqs=4)
    assert len(learnings) == 3


def test_the_same_numbers_in_other_snapshot_objects_share_the_learning(learnings: list[int]) -> None:
    # what the simulation child sees: each request's history arrives unpickled, as new objects
    history, window = _window()
    predict(history, window, CHANGES[0])
    copies = {id(s): replace(s) for s in history}
    predict([copies[id(s)] for s in history], [copies[id(s)] for s in window], CHANGES[1])
    assert len(learnings) == 1


def test_snapshots_at_the_addresses_of_freed_ones_are_keyed_by_their_bytes_not_taken_for_them() -> None:
    # the identity key holds no snapshot alive: an entry whose snapshots are gone (their weak references no longer
    # lead to the objects now at those addresses) is no match, and the new ones are keyed by what they hold
    history, _ = _window()
    gone = [replace(s) for s in history]  # stand-ins for the freed snapshots the entry was made from
    settings: tuple[object, ...] = (None,)
    ident = (tuple(map(id, history)), (), pickle.dumps(settings, pickle.HIGHEST_PROTOCOL))
    learn_module._keys[ident] = (b"stale", [weakref.ref(s) for s in gone])
    assert learn_module._key(history, [], settings) != b"stale"
    assert learn_module._key(history, [], settings) == learn_module._key(gone, [], settings)  # same bytes


def test_the_headroom_search_reuses_the_windows_learning_from_its_predictions(learnings: list[int]) -> None:
    history, window = _window()
    predict(history, window, CHANGES[0])
    search(history, window, None, {"ttft_p95": 60.0})
    assert len(learnings) == 1


class _EverySimulation(Planner):
    """The search as it was: every probe simulated, none recognised as a run already made."""

    def _run(self, engine, workload, replicas, duration_s):  # type: ignore[no-untyped-def]
        self.simulations += 1
        return plan_module.simulate(engine, self.basis.step, workload, replicas, duration_s, self.basis.seed)


@pytest.mark.slow  # two headroom searches
def test_headroom_and_replicas_needed_are_those_of_the_search_that_simulates_every_probe() -> None:
    history, window = _window()
    basis = learn_module.learn(history, window)
    # TTFT broken at x1 (24 clients, 4 slots): bisected below x1, where 2 and 4 replicas are x1/2 and x1/4
    slos = {"ttft_p95_s": 0.5, "itl_p50_s": 0.05}
    quick, full = Planner(basis, slos), _EverySimulation(basis, slos)
    for planner in (quick, full):
        planner.answer = ({k: planner.headroom(k) for k in slos}, planner.replicas_needed())  # type: ignore[attr-defined]
    assert quick.answer == full.answer  # type: ignore[attr-defined]
    assert quick.simulations < full.simulations, (quick.simulations, full.simulations)
