"""The advisor's simulations at fleet size: shared by targets with one fingerprint, a bounded queue dropping the oldest."""

from __future__ import annotations

import shutil
from pathlib import Path

from prometheus_client import generate_latest

from kvdoctor.ingest.parse import parse
from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.status.exposition import make_registry
from kvdoctor.status.state import DaemonState
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.sharing import Jobs, fingerprint
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
