"""The daemon's what-if queue holds only simulations: a look that keeps an effect is decided where it is asked, so it
neither waits behind a simulation in progress nor fills the bounded queue (1,000 targets with reliefs look at ~3,000
predictions every 30 s)."""

from __future__ import annotations

import threading
from collections import deque
from types import SimpleNamespace

from kvdoctor.verdicts import Advice, Diagnosis, Effect
from kvdoctor.whatif import advisor as advisor_module
from kvdoctor.whatif import sharing
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.sharing import NEAR, Fingerprint
from tests.support.wait import until


def _fp(rate: float) -> Fingerprint:
    return Fingerprint(("cfg",), rate, 24.0, 340.0, 390.0, 0.0, 0.005, 0.5)


class _Fleet:
    """A background Advisor whose windows' fingerprints the test sets and whose simulation, run on the worker
    thread, is recorded and can be held in progress (`hold`); the cycle's clock is the `t` each look passes."""

    def __init__(self, monkeypatch, max_queue: int = 4096) -> None:
        self.fps: dict[str, Fingerprint] = {}
        self.simulated: list[tuple[str, float]] = []
        self.running, self.released = threading.Event(), threading.Event()
        self.released.set()
        self.advisor = Advisor(background=True, max_queue=max_queue)
        self.now = 0.0

        def steady(history, window_s):  # one snapshot, named for its target, stands for a 90 s steady window
            return [SimpleNamespace(t=self.now, name=history[0].name)], self.now - 90.0, self.now

        def predict(history, window, change, **kwargs):
            self.simulated.append((window[0].name, window[0].t))
            self.running.set()
            assert self.released.wait(30), "the test never let the simulation end"
            return None

        monkeypatch.setattr(advisor_module, "steady", steady)
        monkeypatch.setattr(sharing, "fingerprint", lambda window, cap=None: self.fps[window[0].name])
        monkeypatch.setattr(advisor_module, "predict", predict)
        monkeypatch.setattr(advisor_module, "effect_of", lambda p, change, t: Effect(change, {}, {}, "", t=t))

    def look(self, target: str, t: float) -> Effect | None:
        """One cycle's annotate of a target whose advice names a change; the effect it shows."""
        self.now = t
        self.fps.setdefault(target, _fp(1.0))
        self.advisor._history.setdefault(target, deque([SimpleNamespace(t=t, name=target)]))
        d = Diagnosis(target, "m", t, "compute", t - 60, advice=[Advice("replicas", "", "", {"replicas": 2})])
        return self.advisor.annotate([d], t)[0].advice[0].effect

    def hold(self, target: str, t: float) -> None:
        """A simulation of target's moved window starts at t and stays in progress until `release`."""
        self.released.clear()
        self.running.clear()
        self.fps[target] = _fp(1e3)  # far from every other window: not shared
        self.look(target, t)
        until(self.running.is_set, timeout=10.0, what="the worker to start simulating")

    def release(self) -> None:
        self.released.set()
        until(lambda: self.idle(), timeout=10.0, what="the worker to finish what is queued")

    def idle(self) -> bool:
        jobs = self.advisor._jobs
        return len(jobs) == 0 and not jobs._pending


def test_looks_that_keep_their_effect_do_not_queue_behind_a_simulation_in_progress(monkeypatch):
    fleet = _Fleet(monkeypatch)
    names = [f"t{i:02d}" for i in range(20)]
    for i, name in enumerate(names):  # 20 targets, windows too far apart to share: each simulated once
        fleet.fps[name] = _fp(1.3**i)
        fleet.look(name, 0.0)
    until(fleet.idle, timeout=10.0, what="the first simulations")
    assert len(fleet.simulated) == 20
    fleet.hold("slow", 10.0)  # another target's simulation runs for minutes
    before = fleet.advisor.stats()
    for t in (30.0, 60.0, 90.0, 120.0, 150.0):  # every target looked at again every 30 s, its window unmoved
        shown = [fleet.look(name, t) for name in names]
        assert fleet.advisor.stats()["queued"] == 0, f"looks that keep an effect were queued at {t:g} s"
        assert all(e is not None and e.t == 0.0 for e in shown)  # the effect simulated at 0 s, still shown
    after = fleet.advisor.stats()
    assert after["kept"] - before["kept"] == 20 * 5
    assert after["computed"] == before["computed"] and after["dropped"] == 0
    fleet.release()
    assert fleet.simulated[20:] == [("slow", 10.0)]


def test_a_moved_window_is_still_queued_while_a_simulation_runs_and_simulated_after_it(monkeypatch):
    fleet = _Fleet(monkeypatch)
    for name, rate in (("a", 1.0), ("b", 2.0)):
        fleet.fps[name] = _fp(rate)
        fleet.look(name, 0.0)
    until(fleet.idle, timeout=10.0, what="the first simulations")
    fleet.hold("slow", 10.0)
    fleet.fps["a"] = _fp(1.5)  # a's traffic moved
    for t in (30.0, 45.0):  # asked again the next cycle: queued once
        shown_a, shown_b = fleet.look("a", t), fleet.look("b", t)
    assert fleet.advisor.stats()["queued"] == 1
    assert shown_a is not None and shown_a.t == 0.0  # the old effect is shown until the new one is simulated
    assert shown_b is not None and shown_b.t == 0.0  # b's window did not move: kept
    fleet.release()
    assert fleet.simulated[-2:] == [("slow", 10.0), ("a", 45.0)]
    fleet.now = 60.0
    got = fleet.look("a", 60.0)
    assert got is not None and got.t == 30.0  # the simulation asked at 30 s


def test_a_full_queue_still_drops_its_oldest_simulation_and_counts_it(monkeypatch):
    fleet = _Fleet(monkeypatch, max_queue=2)
    fleet.hold("slow", 0.0)
    for i in range(5):  # five new windows while the queue holds two: the three oldest requests dropped
        fleet.fps[f"n{i}"] = _fp(1.3**i)
        fleet.look(f"n{i}", 1.0)
    stats = fleet.advisor.stats()
    assert (stats["queued"], stats["dropped"]) == (2, 3)
    fleet.release()
    assert [name for name, _ in fleet.simulated] == ["slow", "n3", "n4"]


# --- refresh waves: replicas' misses while a near window is simulated, and effects simulated together expiring


def test_replicas_near_a_window_queued_wait_for_its_simulation_instead_of_queueing_their_own(monkeypatch):
    fleet = _Fleet(monkeypatch)
    fleet.hold("slow", 0.0)  # the worker is busy: what the next cycle asks for stays queued
    names = [f"r{i:03d}" for i in range(100)]
    for i, name in enumerate(names):  # 100 replicas of one engine, none simulated yet, windows within NEAR
        fleet.fps[name] = _fp(1.0 + NEAR / 2 * i / len(names))
        fleet.look(name, 1.0)
    fleet.fps["far"] = _fp(2.0)  # another workload: its own simulation
    fleet.look("far", 1.0)
    assert fleet.advisor.stats()["queued"] == 2
    fleet.release()
    assert [name for name, _ in fleet.simulated] == ["slow", "r000", "far"]
    shown = [fleet.look(name, 6.0) for name in names]  # the next cycle: the first replica's effect, shared
    assert all(e is not None and e.t == 1.0 for e in shown)
    assert len(fleet.simulated) == 3 and fleet.advisor.stats()["queued"] == 0


def test_effects_simulated_together_expire_over_several_cycles_and_never_past_the_refresh(monkeypatch):
    fleet = _Fleet(monkeypatch)
    names = [f"t{i:02d}" for i in range(40)]
    for i, name in enumerate(names):  # 40 workloads too far apart to share, simulated in one wave
        fleet.fps[name] = _fp(1.3**i)
        fleet.look(name, 0.0)
    until(fleet.idle, timeout=10.0, what="the first simulations")
    for t in range(5, 200, 5):  # 5 s cycles, every window unmoved
        shown = [fleet.look(name, float(t)) for name in names]
        assert all(e is not None and t - e.t <= 180.0 for e in shown), (
            f"an effect older than refresh_s at {t} s"
        )
        until(fleet.idle, timeout=10.0, what="the worker")
    again = [t for _, t in fleet.simulated[40:]]
    assert sorted(name for name, _ in fleet.simulated[40:]) == names  # each refreshed once, before 180 s
    per_cycle = {t: again.count(t) for t in again}
    assert len(per_cycle) >= 4 and max(per_cycle.values()) <= len(names) / 3, per_cycle
