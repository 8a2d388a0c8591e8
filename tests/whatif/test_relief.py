"""The limit is the one whose relief helps: the simulator's check of the cap ×2, the cache ×2 and a second replica."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from kvdoctor.ceiling import CEILING_SHARE
from kvdoctor.diagnosis import advise
from kvdoctor.pipeline import Pipeline
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import Advice, Diagnosis, Effect
from kvdoctor.whatif import gains, relief
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.effectcache import Key
from kvdoctor.whatif.knobs import KNOBS

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
COBIND = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-cobinding/llama_cobind_c32.jsonl.gz"


def test_a_clear_cap_is_not_second_guessed():
    # --max-num-seqs 4 with 20 waiting, tokens at light-load speed: only the advice's own change is simulated
    advisor = Advisor()
    pipeline = Pipeline(load_files(default_rule_files()), advisor=advisor)
    capped = [
        d
        for c in replay(pipeline, [PAIRS / "batchcap_before.jsonl.gz"], 5.0)
        for d in c.diagnoses
        if d.verdict == "batch_cap"
    ]
    assert capped
    simulated = {next(iter(dict(k[1]))) for k in advisor._effects}
    assert simulated == {"max_num_seqs"}, simulated
    assert not any(f.name == "relief_check" for d in capped for f in d.findings)
    assert capped[-1].advice[0].flag == "--max-num-seqs"


class _From(Advisor):
    """The real advisor (sync), keeping every scrape but asked only from `at`: one window's relief check."""

    def __init__(self, at: float) -> None:
        super().__init__()
        self.at = at

    def annotate(self, diagnoses: list[Diagnosis], t: float) -> list[Diagnosis]:
        return super().annotate(diagnoses, t) if t >= self.at else diagnoses


def _keys_of(v: object) -> set[str]:
    """Every key of every dict in a JSON document."""
    if isinstance(v, dict):
        return {*v, *(k for x in v.values() for k in _keys_of(x))}
    return {k for x in v for k in _keys_of(x)} if isinstance(v, list) else set()


def test_a_relief_checks_further_draws_are_cached_apart_and_never_shown():
    # llama_cobind's cap-32 window (labels.json: the rule's batch_cap, relieved by compute), asked at its end
    advisor = _From(1796169509.6)
    pipeline = Pipeline(load_files(default_rule_files()), advisor=advisor)
    d = next(d for c in replay(pipeline, [COBIND], 5.0) if c.t >= advisor.at for d in c.diagnoses)
    check = next(f for f in d.findings if f.name == "relief_check")  # its draws named compute
    keys = list(advisor._effects)
    changes = {k.change for k in keys}
    assert len(changes) == 3 and {k.draw for k in keys} == {0, 1}  # two draws agreed: no third
    for change in changes:
        first, further = (advisor._effects.get(Key(d.target, change, n)) for n in (0, 1))
        assert first is not None and further is not None and first is not further
        assert first.after_p10 and not further.after_p10  # a further draw's point values only
        # either may be the effect a check shows (the first draw naming what most say): knobs only
        assert first.change == further.change == dict(change)
    # one simulation per change and draw: draw 0 of the cap x2 is the rule's advice's own effect, not simulated again
    assert advisor.stats()["computed"] == len(keys) == 6
    cap = next(a for a in d.advice if a.change == {"max_num_seqs": 64})
    assert cap.effect is advisor._effects.get(Key(d.target, (("max_num_seqs", 64),)))
    # what a user sees (the API's JSON, the advice, the evidence) names knobs, never a draw
    shown = d.to_dict()
    assert not {k for k in _keys_of(shown) if "draw" in k.lower()}
    assert "__draw__" not in json.dumps(shown)
    simulated = [a for a in [*d.advice, *check.advice] if a.change]
    assert len(simulated) == 3  # the replica (leading), the cap x2, and the check's own replica
    for a in simulated:
        assert a.change is not None and set(a.change) <= set(KNOBS), a.change
        assert a.effect is not None and a.effect.change == a.change
    assert set(d.evidence) >= {"limit_rule", "limit_checked"} and d.verdict == "compute"


def _effect(change, now, after, then="compute", **load):
    return Effect(change, now, after, then, **load)


def _capped() -> Diagnosis:
    ev = {
        "running_max_1m": 32.0,
        "waiting_avg_1m": 11.0,
        "kv_cache_tokens": 65536.0,
        "kv_usage_max_1m": 0.3,
        "itl_p50_s": 0.06,
        "itl_batch_baseline_s": 0.01,
    }  # ITL 6x its light-load value: compute is borderline
    return Diagnosis(
        "gpu-1:8000",
        "m",
        0.0,
        "batch_cap",
        0.0,
        [],
        ev,
        [Advice("--max-num-seqs", "raise `--max-num-seqs` from 32", "signals", {"max_num_seqs": 64})],
    )


def _predicted(cap_after, cache_after, replica_after):
    now = {"ttft_p95_s": 8.0, "itl_p50_s": 0.06, "generation_tokens_per_s": 149.0}
    d = _capped()
    by_limit = {r.limit: r for r in relief.reliefs(d)}
    return d, {
        "batch_cap": (by_limit["batch_cap"], _effect({"max_num_seqs": 64}, now, {**now, **cap_after})),
        "kv_cache": (by_limit["kv_cache"], _effect({"kv_cache_tokens": 131072}, now, {**now, **cache_after})),
        "compute": (by_limit["compute"], _effect({"replicas": 2}, now, {**now, **replica_after}, "healthy")),
    }


def test_a_cap_whose_raise_buys_nothing_is_co_binding_and_compute_is_named():
    d, effects = _predicted(
        {"generation_tokens_per_s": 148.0, "itl_p50_s": 0.09, "ttft_p95_s": 7.9},
        {},
        {"generation_tokens_per_s": 150.0, "ttft_p95_s": 4.0, "itl_p50_s": 0.03},
    )
    assert [r.change for r in relief.reliefs(d)] == [
        {"max_num_seqs": 64},
        {"kv_cache_tokens": 131072},
        {"replicas": 2},
    ]
    f = relief.check(d, effects)
    assert f is not None and f.name == "relief_check"
    assert f.evidence["limit_rule"] == "batch_cap" and f.evidence["limit_checked"] == "compute"
    assert f.evidence["co_binding"] == "batch_cap"
    assert (
        "buys no throughput (149 tok/s either way): compute-bound; a second replica halves TTFT p95"
        in f.summary
    )
    relief.lead_with(d, f)
    assert [a.change for a in d.advice] == [
        {"replicas": 2},
        {"max_num_seqs": 64},
    ]  # the change that helps first
    assert d.advice[0].effect is effects["compute"][1]
    assert d.verdict == "batch_cap"  # the rule's name stays, as the pack's `bottleneck` label does


def test_the_relief_that_helps_most_names_the_limit():
    d, effects = _predicted({}, {"ttft_p95_s": 2.0, "generation_tokens_per_s": 160.0}, {"ttft_p95_s": 6.0})
    f = relief.check(d, effects)
    assert f is not None and f.evidence["limit_checked"] == "kv_cache"


def test_no_check_when_the_rules_relief_helps_or_nothing_does_or_it_is_not_predicted_yet():
    d, effects = _predicted({"ttft_p95_s": 2.0, "generation_tokens_per_s": 290.0}, {}, {"ttft_p95_s": 4.0})
    assert relief.check(d, effects) is None  # raising the cap drains the queue: batch_cap it is
    d, effects = _predicted({}, {}, {})
    assert relief.check(d, effects) is None  # nothing helps: no better name than the rule's
    d, effects = _predicted({}, {}, {"ttft_p95_s": 4.0})
    effects.pop("compute")
    assert relief.check(d, effects) is None  # the replica not simulated yet
    healthy = Diagnosis("gpu-1:8000", "m", 0.0, "healthy", 0.0)
    assert relief.reliefs(healthy) == []
    clear = _capped()
    clear.evidence["itl_p50_s"] = (
        0.012  # tokens as fast as the batch allows, KV mostly free: a cap and nothing else
    )
    assert relief.reliefs(clear) == []


def test_when_the_simulator_is_clear_the_verdict_is_the_limit_whose_relief_helps():
    d, effects = _predicted(
        {"generation_tokens_per_s": 148.0, "itl_p50_s": 0.09, "ttft_p95_s": 7.9},
        {},
        {"generation_tokens_per_s": 150.0, "ttft_p95_s": 4.0, "itl_p50_s": 0.03},
    )
    f = relief.check(d, effects)
    assert f is not None
    relief.name_the_limit(d, f)
    assert d.verdict == "compute" and d.bottleneck == "compute"
    # both names stay on record: the rule's as co-binding
    assert d.evidence["limit_rule"] == "batch_cap" and d.evidence["co_binding"] == "batch_cap"
    assert d.evidence["limit_checked"] == "compute"


def _by_draw(draws, asked):
    """An effect_of answering each draw's prediction from its own set of effects, noting the draws asked."""

    def effect_of(change, draw):
        asked.append(draw)
        return next(eff for r, eff in draws[draw].values() if r.change == change)

    return effect_of


def test_a_window_at_its_capacitys_edge_is_named_by_what_most_draws_say():
    # at the edge one draw's arrivals overrun the cap (raising it buys nothing: compute) and the next two's do not
    _, compute = _predicted(
        {"generation_tokens_per_s": 148.0, "itl_p50_s": 0.09, "ttft_p95_s": 7.9},
        {},
        {"generation_tokens_per_s": 150.0, "ttft_p95_s": 4.0, "itl_p50_s": 0.03},
    )
    _, cap = _predicted({"ttft_p95_s": 2.0, "generation_tokens_per_s": 290.0}, {}, {"ttft_p95_s": 4.0})
    asked: list[int] = []
    d = _capped()
    relief.apply(d, _by_draw([compute, cap, cap], asked))
    assert d.verdict == "batch_cap" and not [f for f in d.findings if f.name == "relief_check"]
    d = _capped()
    relief.apply(d, _by_draw([cap, compute, compute], asked))
    check = next(f for f in d.findings if f.name == "relief_check")
    assert d.verdict == "compute" and check.advice[0].effect is compute["compute"][1]  # a draw that said so
    # two draws that agree settle it: the third is not simulated
    asked.clear()
    d = _capped()
    relief.apply(d, _by_draw([compute, compute, cap], asked))
    assert d.verdict == "compute" and set(asked) == {0, 1}


def test_a_relief_check_waits_for_every_draw_it_asks():
    # the second draw not predicted yet (queued in background mode): no name from one draw
    _, compute = _predicted({}, {}, {"generation_tokens_per_s": 150.0, "ttft_p95_s": 4.0})
    d = _capped()
    relief.apply(d, lambda change, draw: _by_draw([compute], [])(change, draw) if draw == 0 else None)
    assert d.verdict == "batch_cap" and not d.findings


def test_a_relief_check_for_another_verdict_changes_nothing():
    d, effects = _predicted({}, {}, {"ttft_p95_s": 4.0})
    f = relief.check(d, effects)
    assert f is not None
    d.verdict = "healthy"  # the rule's limit ended since the check: not applied to another verdict
    relief.name_the_limit(d, f)
    assert d.verdict == "healthy" and "limit_rule" not in d.evidence


# What the simulator said on llama_ramp_c32's 1.1 req/s step (cap 32 reached, 31 running, a queue; clients hold at
# most 44 in flight, so a closed loop): raising the cap empties the queue but buys no throughput.
SATURATED = {"ttft_p95_s": 17.5, "itl_p50_s": 0.285, "generation_tokens_per_s": 48.9}


def _saturated(cap_after, replica_after, rule="batch_cap", **load):
    d = _capped()
    d.verdict = rule
    by_limit = {r.limit: r for r in relief.reliefs(d)}
    load = load or {"closed_loop": True}
    changes = {
        "batch_cap": {"max_num_seqs": 64},
        "kv_cache": {"kv_cache_tokens": 131072},
        "compute": {"replicas": 2},
    }
    after = {"batch_cap": cap_after, "kv_cache": {}, "compute": replica_after}
    return d, {
        k: (by_limit[k], _effect(changes[k], SATURATED, {**SATURATED, **after[k]}, **load)) for k in changes
    }


def test_at_capacity_a_relief_that_buys_no_throughput_only_trades_itl_for_ttft():
    # the cap ×2 cuts TTFT p95 7× at +3 % tokens/s: the same throughput, the wait moved into decoding
    d, effects = _saturated(
        {"ttft_p95_s": 2.59, "generation_tokens_per_s": 50.5},
        {"ttft_p95_s": 2.41, "itl_p50_s": 0.17, "generation_tokens_per_s": 93.1},
    )
    assert not gains.helps(effects["batch_cap"][1], "ttft_p95_s")
    f = relief.check(d, effects)
    assert (
        f is not None and f.evidence["limit_checked"] == "compute" and f.evidence["co_binding"] == "batch_cap"
    )
    assert f.summary == (
        "the batch cap is reached, but raising --max-num-seqs to 64 buys no throughput (48.9 tok/s either way); "
        "TTFT p95 17.5 → 2.59 s at the same throughput only moves the wait into decoding: compute-bound; "
        "a second replica doubles throughput (48.9 → 93.1 tok/s) and cuts TTFT p95 7.3×"
    )
    relief.lead_with(d, f)
    relief.name_the_limit(d, f)
    assert d.verdict == "compute" and d.advice[0].change == {"replicas": 2}
    # the same numbers below capacity (an open loop the server keeps up with): the TTFT cut is the help it looks
    cap, replica = {"ttft_p95_s": 2.59, "generation_tokens_per_s": 50.5}, {"ttft_p95_s": 2.41}
    d, effects = _saturated(cap, replica, closed_loop=False)
    assert gains.helps(effects["batch_cap"][1], "ttft_p95_s") and relief.check(d, effects) is None


def test_past_capacity_the_queue_grows_either_way_and_the_replica_ends_the_overload():
    # an open loop above capacity: TTFT has no steady value now (it measures how long was simulated)
    cap, replica = {"generation_tokens_per_s": 49.8}, {"ttft_p95_s": 3.0, "generation_tokens_per_s": 76.0}
    d, effects = _saturated(cap, replica, overloaded_now=True)
    for k, (r, e) in effects.items():  # only the replica's side is not overloaded after
        after = e.after if k == "compute" else {**e.after, "ttft_p95_s": None}
        effects[k] = (r, replace(e, now={**SATURATED, "ttft_p95_s": None}, after=after))
    f = relief.check(d, effects)
    assert f is not None and f.evidence["limit_checked"] == "compute"
    assert (
        "buys no throughput (48.9 tok/s either way); the queue grows either way: compute-bound" in f.summary
    )
    assert (
        "a second replica raises throughput +55% (48.9 → 76 tok/s) and ends the overload (TTFT p95 ≈3 s)"
        in (f.summary)
    )


def test_below_capacity_a_ttft_cut_bought_with_slower_tokens_is_no_help():
    d, effects = _predicted(
        {"ttft_p95_s": 2.0, "itl_p50_s": 0.09}, {}, {"ttft_p95_s": 6.0, "itl_p50_s": 0.05}
    )
    assert not gains.helps(effects["batch_cap"][1], "ttft_p95_s")  # ITL p50 +50 %
    f = relief.check(d, effects)
    assert f is not None and f.evidence["limit_checked"] == "compute"  # the replica cuts both
    d, effects = _predicted(
        {"ttft_p95_s": 2.0, "itl_p50_s": 0.063}, {}, {"ttft_p95_s": 6.0, "itl_p50_s": 0.05}
    )
    assert relief.check(d, effects) is None  # ITL p50 +5 % for TTFT ÷4: the cap it is


def test_a_compute_call_whose_cap_raise_buys_throughput_names_the_cap():
    # the rule says compute, but 64 seqs complete 15 % more at capacity: the cap binds first, compute co-binding
    d, effects = _saturated(
        {"generation_tokens_per_s": 56.2}, {"generation_tokens_per_s": 93.1}, rule="compute"
    )
    f = relief.check(d, effects)
    assert (
        f is not None and f.evidence["limit_checked"] == "batch_cap" and f.evidence["co_binding"] == "compute"
    )
    assert f.summary.startswith(
        "batch cap-bound before compute: raising --max-num-seqs to 64 raises throughput +15%"
    )
    d, effects = _saturated(
        {"generation_tokens_per_s": 50.0}, {"generation_tokens_per_s": 93.1}, rule="compute"
    )
    assert relief.check(d, effects) is None  # only the replica helps: compute, as the rule said


def test_a_cap_raise_at_the_ceiling_names_compute_with_the_reason():
    # llama_cobind at 15 s scrapes as simulated: the cap x2 +5.3 % tokens/s for ITL x3.3, the queue still growing
    d, effects = _saturated(
        {"generation_tokens_per_s": 51.5, "itl_p50_s": 0.90},
        {"generation_tokens_per_s": 64.5, "itl_p50_s": 0.15},
        overloaded_now=True,
    )
    # TTFT has no steady value while the queue grows (only the replica ends it)
    for k, (r, e) in effects.items():
        after = e.after if k == "compute" else {**e.after, "ttft_p95_s": None}
        effects[k] = (r, replace(e, now={**e.now, "ttft_p95_s": None}, after=after))
    f = relief.check(d, effects)
    assert f is not None and f.evidence["limit_checked"] == "compute"
    assert f.evidence["batch_cap_relief_ceiling_share"] >= CEILING_SHARE
    assert (
        "raising --max-num-seqs to 64 buys +5% throughput (48.9 → 51.5 tok/s) for ITL p50 ×3.2: the added batch "
        "runs at 93% of the compute ceiling" in f.summary
    ), f.summary


def test_a_second_replica_of_a_data_parallel_server_doubles_its_engines():
    # the simulation counts engines: replicas=2 on a server of two engines would change nothing
    d, _ = _predicted({}, {}, {})
    d.evidence = {**d.evidence, "engines": 2.0}
    assert relief.reliefs(d)[-1].change == {"replicas": 4}
    slow = {"itl_p50_s": 0.1, "itl_baseline_s": 0.02}
    assert advise.compute(slow, engines=2)[0].change == {"replicas": 4}
    assert advise.compute(slow)[0].change == {"replicas": 2}
