"""Every finding kvdoctor can report, for its runbook: the rule pack's alerts and the few kvdoctor raises itself."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from doctor.diagnosis.advise import DOWN_ADVICE, MISSING_ADVICE
from doctor.diagnosis.signals import EVIDENCE_FOR, INSTANCE_SIGNALS, SIGNALS
from doctor.rules.loader import Group, Rule

# Where kvdoctor serves the runbook; the pack's runbook_url annotations are this path + #anchor.
RUNBOOK_PATH = "/runbook"
DEFAULT_RUNBOOK_PAGE = "http://127.0.0.1:9860" + RUNBOOK_PATH  # on the daemon's default listen address


@dataclass(frozen=True)
class KvdoctorFinding:
    """A finding raised by kvdoctor's own code rather than a rule of the pack: what it means and what to do."""

    severity: str
    meaning: str
    advice: str
    evidence: tuple[str, ...] = ()


# Raised in doctor.diagnosis.classify beside the pack's alerts (each Finding(...) there has an entry here).
KVDOCTOR_FINDINGS: dict[str, KvdoctorFinding] = {
    "target_down": KvdoctorFinding(
        "critical",
        "kvdoctor's own scrape of the target failed (connection refused, timeout, an error status or a body "
        "that is not Prometheus text); the target's class is `unknown` until it answers again.",
        DOWN_ADVICE,
        ("error",),
    ),
    "metrics_missing": KvdoctorFinding(
        "warning",
        "The target answers but its last scrape lacks families a diagnosis needs (KV usage, running and waiting "
        "requests, preemptions, the TTFT and inter-token latency histograms), so some limits cannot be told apart.",
        MISSING_ADVICE,
        ("missing",),
    ),
    "max_model_len_oversized": KvdoctorFinding(
        "info",
        "`--max-model-len` (from vllm:cache_config_info, or bounded by the token histograms' buckets) is at least "
        "four times the p99 request length (prompt + generation) over at least 20 finished requests.",
        "The finding names a `--max-model-len` that still fits the observed p99 request. vLLM V1 allocates KV "
        "blocks as requests grow, so a shorter limit frees cache only where long requests actually hold it; "
        "it also lets the engine start on smaller memory.",
        ("max_model_len", "request_p99_tokens", "requests_observed"),
    ),
}


@dataclass(frozen=True)
class FindingInfo:
    """One finding as the runbook shows it."""

    name: str
    anchor: str  # the runbook section it links to (several findings may share one, e.g. spec_decode)
    severity: str
    summary: str
    description: str
    advice: str
    evidence: tuple[tuple[str, str], ...]  # (evidence key, the recording rule behind it or "")
    bottleneck: str = ""
    rules: tuple[Rule, ...] = ()  # the pack's alerting rules raising it; empty for kvdoctor's own
    kvdoctor: KvdoctorFinding | None = None  # set when kvdoctor's own code raises it too


def anchor_of(runbook_url: str, name: str) -> str:
    """The section a runbook_url annotation points to (its #fragment), else the finding's name."""
    return urlsplit(runbook_url).fragment or name


def catalogue(groups: list[Group]) -> list[FindingInfo]:
    """Every finding the classifier can emit with these rules: the pack's alerts first, in pack order."""
    rules: dict[str, list[Rule]] = {}
    for g in groups:
        for r in g.rules:
            if r.kind == "alert" and r.labels.get("finding"):
                rules.setdefault(r.labels["finding"], []).append(r)
    out = []
    for name, rs in rules.items():
        first = rs[0]
        a = first.annotations
        out.append(
            FindingInfo(
                name, anchor_of(a.get("runbook_url", ""), name), first.labels.get("severity", "warning"),
                a.get("summary", name), a.get("description", ""), a.get("advice", ""), _evidence(name),
                first.labels.get("bottleneck", ""), tuple(rs), KVDOCTOR_FINDINGS.get(name),
            )
        )  # fmt: skip
    for name, k in KVDOCTOR_FINDINGS.items():
        if name not in rules:
            evidence = tuple((key, "") for key in k.evidence)
            out.append(FindingInfo(name, name, k.severity, "", k.meaning, k.advice, evidence, kvdoctor=k))
    return out


def _evidence(name: str) -> tuple[tuple[str, str], ...]:
    rules = {**SIGNALS, **INSTANCE_SIGNALS}
    return tuple((key, rules.get(key, "")) for key in EVIDENCE_FOR.get(name, ()))


def runbook_link(page: str, runbook_url: str, name: str) -> str:
    """The absolute link for a finding: kvdoctor's own `/runbook#…` (or none) on page; other URLs as given."""
    if not runbook_url:
        return f"{page}#{name}"
    if runbook_url == RUNBOOK_PATH or runbook_url.startswith(RUNBOOK_PATH + "#"):
        return page + runbook_url[len(RUNBOOK_PATH) :]
    return runbook_url
