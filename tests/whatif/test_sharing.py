"""The advisor's simulations at fleet size: shared by targets with one fingerprint, a bounded queue dropping the oldest."""

from __future__ import annotations

import math
import shutil
from pathlib import Path
from types import SimpleNamespace

from prometheus_client import generate_latest

import kvdoctor
from kvdoctor.ingest.parse import parse
from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.verdicts import Advice, Diagnosis, Effect
from kvdoctor.whatif import advisor as advisor_module
from kvdoctor.whatif import sharing
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.jobs import Jobs
from kvdoctor.whatif.sharing import NEAR, Fingerprint, fingerprint
from kvdoctor.whatif.sources import recording_snaps

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
BATCHCAP, KV = PAIRS / "batchcap_before.jsonl.gz", PAIRS / "kv2x_before.jsonl.gz"


def _effects(cycles: list, target: str) -> dict[tuple, str]:
    """The last predicted effect per change the target's advice carried, as text."""
    out = {}
    for c in cycles:
        for d in c.diagnoses:
            if d.target == target:
                for a in [*d.advice, *(a for f in d.findings for a in f.advice)]:
                    if a.effect is not None:
                        out[tuple(sorted(a.effect.change.items()))] = a.effect.text
    return out


def test_replicas_with_one_window_share_one_simulation_and_metrics_say_so(tmp_path):
    paths = {n: tmp_path / f"{n}.jsonl.gz" for n in ("a", "b", "c")}
    shutil.copy(BATCHCAP, paths["a"])
    shutil.copy(BATCHCAP, paths["b"])  # a replica of a: same model, flags and traffic
    shutil.copy(KV, paths["c"])  # another server
    advisor = Advisor()
    pipeline = Pipeline(load_files(default_rule_files()), advisor=advisor)
    cycles = list(replay(pipeline, [str(p) for p in paths.values()], interval_s=15.0))
    a, b, c = (_effects(cycles, n) for n in "abc")
    assert a and a == b, "the replica shows other predictions than the target it copies"
    assert c and c != a
    stats = advisor.stats()
    # b asked for every effect a computed, and was given a's
    assert stats["shared"] >= len(b) and stats["computed"] >= len(a) + len(c)
    assert stats["dropped"] == 0
    state = DaemonState()
    state.note_whatif(stats)
    text = generate_latest(make_registry(state)).decode()
    got = {(s.name, *s.labels): s.value for s in parse(text).samples if s.name.startswith("kvdoctor_whatif")}
    assert got[("kvdoctor_whatif_simulations_total", ("outcome", "shared"))] == stats["shared"]
    assert got[("kvdoctor_whatif_simulations_total", ("outcome", "computed"))] == stats["computed"]
    assert got[("kvdoctor_whatif_requests_dropped_total",)] == 0.0


def test_the_fingerprint_tells_servers_apart_and_ignores_the_copy():
    batch, kv = recording_snaps(BATCHCAP), recording_snaps(KV)
    assert fingerprint(batch[-20:]) == fingerprint(list(batch[-20:]))
    assert fingerprint(batch[-20:]) != fingerprint(kv[-20:])
    assert fingerprint(batch[-20:]).near(fingerprint(list(batch[-20:])))


def test_a_full_queue_drops_its_oldest_request_counts_it_and_keeps_a_key_once():
    jobs: Jobs[str] = Jobs(maxlen=2)
    assert jobs.put("a", 0.0) and jobs.put("b", 1.0)
    assert not jobs.put("a", 2.0)  # still waiting: asked again, not queued twice
    assert jobs.put("c", 3.0)  # full: "a", the oldest, is dropped
    assert jobs.dropped_total == 1 and len(jobs) == 2
    assert jobs.get(timeout=0) == ("b", 1.0)
    assert not jobs.put("b", 4.0)  # being computed
    jobs.done("b")
    assert jobs.put("a", 5.0)  # dropped earlier, it may be asked again
    assert [jobs.get(timeout=0), jobs.get(timeout=0), jobs.get(timeout=0)] == [("c", 3.0), ("a", 5.0), None]


# --- when a prediction is simulated again: its window's fingerprint moved, a short stretch grew full, or refresh_s passed


def _fp(rate: float = 2.0, *, same: tuple = ("cfg",), ttft: float = 0.5) -> Fingerprint:
    return Fingerprint(same, rate, 24.0, 340.0, 390.0, 0.0, 0.005, ttft)


def test_near_fingerprints_are_one_prediction_and_a_moved_one_is_not():
    base = _fp()
    assert base.near(_fp(2.0 * (1 + NEAR * 0.8)))  # a replica's scrape phase, a rolling window's noise
    assert not base.near(_fp(2.0 * (1 + NEAR * 1.2)))  # traffic that moved
    assert not base.near(_fp(ttft=0.5 * 1.2))  # slower steps: another model or GPU, or a change of load
    assert not base.near(
        _fp(same=("other cfg",))
    )  # configuration, engine settings, load shape, cap: all equal
    assert _fp(ttft=math.nan).near(_fp(ttft=math.nan)) and not _fp(ttft=math.nan).near(base)


def test_one_servers_minute_windows_a_few_scrapes_apart_are_near_and_another_servers_are_not():
    demo = Path(kvdoctor.__file__).parent / "demo"
    compute, kv = (
        recording_snaps(demo / "compute_bound.jsonl.gz"),
        recording_snaps(demo / "kv_bound.jsonl.gz"),
    )
    minute = fingerprint(compute[60:120])
    assert all(minute.near(fingerprint(compute[60 + k : 120 + k])) for k in (1, 2, 5))
    assert not minute.near(fingerprint(kv[60:120]))


class _Fleet:
    """A sync-mode Advisor whose windows' fingerprints and steady stretches the test sets, and whose simulation is
    counted instead of run; the cycle's clock is the `t` each look passes."""

    def __init__(self, monkeypatch, refresh_s: float = 180.0) -> None:
        self.fps: dict[str, Fingerprint] = {}
        self.stretch_s: dict[str, float] = {}
        self.simulated: list[tuple[str, float]] = []
        self.advisor = Advisor(refresh_s=refresh_s)
        asking: list[str] = []

        def steady(history, window_s):  # one snapshot at the look's time stands for the window
            return [SimpleNamespace(t=self.t)], self.t - self.stretch_s[asking[-1]], self.t

        def fingerprint(window, cap=None):
            return self.fps[asking[-1]]

        def predict(history, window, change, **kwargs):
            self.simulated.append((asking[-1], self.t))
            return self.t

        monkeypatch.setattr(advisor_module, "steady", steady)
        monkeypatch.setattr(sharing, "fingerprint", fingerprint)
        monkeypatch.setattr(advisor_module, "predict", predict)
        monkeypatch.setattr(advisor_module, "effect_of", lambda p, change, t: Effect(change, {}, {}, "", t=p))
        self._asking = asking
        self.t = 0.0

    def look(self, target: str, t: float) -> Effect | None:
        """One cycle's annotate of a target whose advice names a change; the effect it shows."""
        self.t = t
        self._asking.append(target)
        self.stretch_s.setdefault(target, 90.0)
        self.fps.setdefault(target, _fp())
        d = Diagnosis(target, "m", t, "compute", t - 60, advice=[Advice("replicas", "", "", {"replicas": 2})])
        return self.advisor.annotate([d], t)[0].advice[0].effect


def test_a_window_looked_at_again_unmoved_keeps_its_prediction_until_the_refresh(monkeypatch):
    fleet = _Fleet(monkeypatch, refresh_s=180.0)
    shown = [fleet.look("a", float(t)) for t in range(0, 600, 5)]  # ten minutes of 5 s cycles, traffic steady
    # simulated at 0, 180, 360 and 540 s: never more often, and what is shown is never older than refresh_s
    assert [t for _, t in fleet.simulated] == [0.0, 180.0, 360.0, 540.0]
    assert all(e is not None and t - e.t < 180.0 for t, e in zip(range(0, 600, 5), shown, strict=True))
    stats = fleet.advisor.stats()
    # looked at every 30 s in between (30..150 s after each, and 570 s): kept
    assert stats["computed"] == 4 and stats["kept"] == 3 * 5 + 1
    assert stats["shared"] == 0


def test_a_moved_window_is_simulated_again_at_its_next_look(monkeypatch):
    fleet = _Fleet(monkeypatch)
    fleet.look("a", 0.0)
    fleet.fps["a"] = _fp(2.0 * (1 + NEAR / 2))  # drifts within NEAR of what was simulated: kept
    for t in range(5, 65, 5):
        fleet.look("a", float(t))
    assert len(fleet.simulated) == 1
    fleet.fps["a"] = _fp(3.0)  # the traffic moved: simulated at the next look, RETRY_S after the last
    got = [fleet.look("a", float(t)) for t in range(65, 100, 5)]
    assert [t for _, t in fleet.simulated] == [0.0, 90.0]
    assert got[-1] is not None and got[-1].t == 90.0


def test_a_young_windows_prediction_is_redone_once_its_stretch_is_full(monkeypatch):
    fleet = _Fleet(monkeypatch)
    fleet.stretch_s["a"] = 35.0  # under STEADY_S: a first answer from a short stretch
    fleet.look("a", 0.0)
    fleet.look("a", 30.0)  # still short, not moved: kept
    fleet.stretch_s["a"] = 65.0
    fleet.look(
        "a", 60.0
    )  # full now: simulated from the longer stretch (a young answer serves young windows only)
    fleet.look("a", 90.0)
    assert [t for _, t in fleet.simulated] == [0.0, 60.0]


def test_replicas_with_near_windows_share_one_simulation_and_far_ones_do_not(monkeypatch):
    fleet = _Fleet(monkeypatch)
    fleet.fps.update(a=_fp(2.0), b=_fp(2.0 * (1 + NEAR / 2)), c=_fp(4.0))
    ea, eb, ec = (fleet.look(name, 0.0) for name in "abc")
    assert [name for name, _ in fleet.simulated] == ["a", "c"]
    assert ea is eb and ec is not ea
    stats = fleet.advisor.stats()
    assert (stats["computed"], stats["shared"]) == (2, 1)
    fleet.look("b", 180.0)  # a's answer is too old now: b simulates its own window
    assert fleet.simulated[-1] == ("b", 180.0)
