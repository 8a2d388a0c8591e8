"""One verdict per (target, model) from the rule pack's alerts and signals, with findings, evidence and advice."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kvdoctor.capacity.advice import max_model_len_finding_text
from kvdoctor.diagnosis import advise, engines, stall
from kvdoctor.diagnosis.engines import Engines
from kvdoctor.diagnosis.evidence import Key, split_engines
from kvdoctor.diagnosis.target import Target
from kvdoctor.jsondoc import JsonObject
from kvdoctor.rules.evaluate import Alert
from kvdoctor.signals import FINDINGS, evidence_for
from kvdoctor.verdicts import LIMITS, Advice, Diagnosis, Finding, Verdict

PRIORITY = ("kv_cache", "batch_cap", "compute")  # when several limits hold, the first explains the others
OVERSIZED = 4.0  # --max-model-len at least this many times the observed p99 request length
MIN_REQUESTS = 20


class Classifier:
    """Keeps, per (target, model), the current class and since when it holds."""

    def __init__(self) -> None:
        self.since: dict[Key, tuple[str, float]] = {}
        self.models: dict[str, set[str]] = {}  # model names seen per target, kept while it is down
        # per target, the steps (classify, advise) that raised in the last classify() and why
        self.failures: dict[str, dict[str, str]] = {}
        self._last: dict[Key, Diagnosis] = {}

    def forget(self, target: str) -> None:
        """Drop what is known of a removed target's models."""
        self.models.pop(target, None)
        for key in [k for k in self._last if k[0] == target]:
            del self._last[key]

    def classify(
        self,
        t: float,
        signals: dict[Key, dict[str, float]],
        alerts: list[Alert],
        targets: Mapping[str, Target],
    ) -> list[Diagnosis]:
        """The diagnoses at t, one per (target, model_name) known."""
        firing: dict[Key, list[Alert]] = {}
        target_level: dict[str, list[Alert]] = {}  # alerts about a target, not a model (e.g. target down)
        for a in alerts:
            if a.state != "firing":
                continue
            instance, model = a.labels.get("instance", ""), a.labels.get("model_name", "")
            if model:
                firing.setdefault((instance, model), []).append(a)
            else:
                target_level.setdefault(instance, []).append(a)
        keys = set(signals) | {k for k in firing if k[0] in targets}
        models: dict[str, set[str]] = {}
        for tgt, m in keys:
            models.setdefault(tgt, set()).add(m)
        for name, st in targets.items():
            known = self.models.setdefault(name, set())
            known |= models.get(name, set()) - {""}
            if st.up is None:
                continue  # not scraped yet: nothing to say
            if name not in models:
                keys |= {(name, m) for m in known} or {(name, "")}
        for key in keys:
            firing.setdefault(key, []).extend(target_level.get(key[0], []))
        out = []
        self.failures = {}
        for key in sorted(keys):
            target = targets.get(key[0]) or Target(key[0])
            try:
                d = self._one(t, key, target, signals.get(key, {}), firing.get(key, []))
            except Exception as exc:  # one target's values must not cost the others their diagnosis
                self._fail(key[0], "classify", exc)
                d = self._last.get(key) or Diagnosis(key[0], key[1], t, Verdict.UNKNOWN, t)
            # kept as classified: the sinks add to a diagnosis' lists (follow-ups, effects) after this
            self._last[key] = d = replace(d, findings=list(d.findings), advice=list(d.advice))
            out.append(replace(d, findings=list(d.findings), advice=list(d.advice)))
        return out

    def _fail(self, target: str, step: str, exc: BaseException) -> None:
        self.failures.setdefault(target, {}).setdefault(step, f"{type(exc).__name__}: {exc}")

    def _one(
        self, t: float, key: Key, target: Target, ev: dict[str, float], alerts: list[Alert]
    ) -> Diagnosis:
        ev, per_engine = split_engines({k: v for k, v in ev.items() if not math.isnan(v)})
        if target.live and target.live.kv_cache_tokens:
            ev["kv_cache_tokens"] = float(target.live.kv_cache_tokens)
        findings = [self._finding(a, ev, target, per_engine) for a in alerts if a.labels.get("finding")]
        if target.up is False:  # kvdoctor's own scrape verdict replaces the rule pack's slower one
            findings = [f for f in findings if f.name != "target_down"]
        findings.sort(
            key=lambda f: (
                f.bottleneck not in PRIORITY,
                PRIORITY.index(f.bottleneck) if f.bottleneck in PRIORITY else 0,
            )
        )
        limits = [f.bottleneck for f in findings if f.bottleneck in LIMITS]
        prev_verdict = self.since.get(key, ("", t))[0]
        if target.up is False:
            verdict = "unknown"
            findings.insert(0, _down(target))
        elif any(f.name == "stalled" for f in findings):
            verdict = "unknown"  # no token moves: no limit can be measured; the stalled finding says why
        elif "quiet" in ev:
            # no request and no token for idle_after (the pack's kvdoctor:quiet): a limit still kept firing ends
            verdict = "idle"
            findings = [f for f in findings if f.bottleneck not in LIMITS]
        elif ev.get("requests_max_10s") == 0 and (prev_verdict in LIMITS or limits):
            # a lull right after a limit (a limited server never drains to zero by itself) ends the limit at once;
            # it is not idle before idle_after has passed, however few scrapes showed nothing
            verdict = "healthy"
            findings = [f for f in findings if f.bottleneck not in LIMITS]
        elif limits:
            verdict = min(limits, key=PRIORITY.index)
        elif ev.get("waiting_deferred", 0) >= 1:
            verdict = (
                "unknown"  # requests held by a LoRA budget or a KV transfer: a limit kvdoctor does not name
            )
        elif "running_avg_1m" not in ev:
            verdict = "unknown"
        elif "generation_tokens_per_s" not in ev or "window_scrapes_1m" not in ev:
            verdict = "unknown"  # busy, but no 15 s of scrapes yet: no verdict without a window
        else:
            verdict = "healthy"
        evidence: dict[str, float | str] = dict(ev)
        evidence.update(engines.explain(verdict, per_engine) or engines.summary(per_engine))
        if target.up:
            findings += _python_findings(target, key[1], ev)
        findings = list({f.name: f for f in reversed(findings)}.values())[::-1]  # one of each, first wins
        prev = self.since.get(key)
        since = prev[1] if prev and prev[0] == verdict else t
        self.since[key] = (verdict, since)
        advice = next((f.advice for f in findings if f.bottleneck == verdict), [])
        return Diagnosis(key[0], key[1], t, Verdict(verdict), since, findings, _round(evidence), advice)

    def _finding(self, a: Alert, ev: dict[str, float], target: Target, per_engine: Engines) -> Finding:
        name = a.labels["finding"]
        bottleneck = a.labels.get("bottleneck", "")
        evidence: dict[str, float | str] = {k: ev[k] for k in evidence_for(name) if k in ev}
        try:
            advice = self._advice(a, name, bottleneck, ev, evidence, target, per_engine)
        except Exception as exc:  # the finding still holds; only its advice is lost this cycle
            self._fail(target.name, "advise", exc)
            advice = []
        return Finding(
            name,
            a.labels.get("severity", "warning"),
            a.annotations.get("summary", name),
            a.annotations.get("description", ""),
            _round(evidence),
            advice,
            a.annotations.get("runbook_url", ""),
            bottleneck,
            a.active_at,
        )

    def _advice(
        self,
        a: Alert,
        name: str,
        bottleneck: str,
        ev: dict[str, float],
        evidence: dict[str, float | str],
        target: Target,
        per_engine: Engines,
    ) -> list[Advice]:
        """The finding's advice, adding to its evidence what the advice rests on."""
        evidence.update(engines.explain(bottleneck, per_engine) if bottleneck else {})
        if bottleneck == "kv_cache":
            advice = engines.balance_first(per_engine) + advise.kv_cache(
                target.live, target.facts.estimate, ev, a.labels.get("model_name")
            )
            if target.live and target.live.kv_cache_tokens:
                evidence["kv_cache_tokens"] = float(target.live.kv_cache_tokens)
        elif bottleneck == "batch_cap":
            cap = a.value if a.value > 0 else None  # the engines' plateau: max_num_seqs is per engine
            advice = engines.balance_first(per_engine) + advise.batch_cap(ev, cap, len(per_engine))
            if len(per_engine) > 1 and cap:
                evidence.pop("running_max_1m", None)
                evidence["batch_cap_per_engine"] = cap
        elif bottleneck == "compute":
            advice = advise.compute(ev, target.facts.gpu_fp8, max(1, len(per_engine)))
        elif name == "engine_imbalance":
            evidence.update(engines.imbalance_evidence(per_engine))
            advice = engines.imbalance_advice(per_engine)
        elif name == "lora_adapter_slots":
            advice = advise.lora_slots(ev, target.live.max_loras if target.live else None)
        elif name == "stalled":
            evidence.update(stall.evidence(ev, per_engine, target.live))
            if a.labels.get("engine"):
                evidence["engine"] = a.labels["engine"]
            advice = stall.advice(ev, per_engine, target.live)
        else:
            advice = [Advice("", a.annotations["advice"])] if a.annotations.get("advice") else []
        return advice

    def to_state(self) -> JsonObject:
        """The since-table as JSON-ready data."""
        return {"since": [[k[0], k[1], b, s] for k, (b, s) in self.since.items()]}

    def restore(self, state: JsonObject) -> None:
        """Reload a since-table saved by to_state()."""
        for item in state.get("since", []):
            try:
                target, model, b, s = item
                self.since[(str(target), str(model))] = (str(b), float(s))
            except (TypeError, ValueError):
                continue


def _down(target: Target) -> Finding:
    return Finding(
        "target_down",
        "critical",
        f"vLLM target {target.name} is down",
        f"The last scrape failed: {target.last_error or 'no answer'}.",
        {"error": target.last_error},
        [Advice("", FINDINGS["target_down"].advice)],
    )


def _python_findings(target: Target, model: str, ev: dict[str, float]) -> list[Finding]:
    out = []
    if target.missing:
        out.append(
            Finding(
                "metrics_missing",
                "warning",
                f"Expected vLLM metrics missing on {target.name}",
                "Without them kvdoctor cannot tell some limits apart: " + ", ".join(target.missing),
                {"missing": ", ".join(target.missing)},
                [Advice("", FINDINGS["metrics_missing"].advice)],
            )
        )
    live = target.live
    if (
        live
        and live.max_model_len_bound
        and live.request_p99_tokens
        and live.requests_observed >= MIN_REQUESTS
    ):
        low, high = live.max_model_len_bound
        exact = live.max_model_len
        limit = exact or low
        p99 = live.request_p99_tokens
        if p99 > 0 and limit >= OVERSIZED * p99:
            text = max_model_len_finding_text(limit, None if exact else high, p99)
            out.append(
                Finding(
                    "max_model_len_oversized",
                    "info",
                    f"--max-model-len on {target.name} is {limit / p99:.0f}× the p99 request length",
                    text,
                    {
                        "max_model_len": float(limit),
                        "request_p99_tokens": round(p99, 1),
                        "requests_observed": float(live.requests_observed),
                    },
                    advise.kv_cache(live, target.facts.estimate, ev)[:1],
                )
            )
    return out


def _round(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in d.items()}
