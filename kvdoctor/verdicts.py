"""Verdicts and their parts — Diagnosis, Finding, Advice: the value types every stage and sink passes on."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any

from kvdoctor.jsondoc import JsonObject


class Verdict(StrEnum):
    """What kvdoctor can conclude about a (target, model), in the order of kvdoctor_bottleneck_code."""

    UNKNOWN = "unknown"
    IDLE = "idle"
    HEALTHY = "healthy"
    BATCH_CAP = "batch_cap"
    COMPUTE = "compute"
    KV_CACHE = "kv_cache"


VERDICTS = tuple(v.value for v in Verdict)
# Limits a server can hit; the other verdicts are states, not limits.
LIMITS = (Verdict.KV_CACHE.value, Verdict.BATCH_CAP.value, Verdict.COMPUTE.value)
SEVERITIES = ("critical", "warning", "info")
# Where kvdoctor serves its runbook; the pack's runbook_url annotations are this path + #<finding>.
RUNBOOK_PATH = "/runbook"
DEFAULT_RUNBOOK_PAGE = "http://127.0.0.1:9860" + RUNBOOK_PATH  # on the daemon's default listen address


# Quantities a predicted effect quotes, with how a person reads them.
EFFECT_QUANTITIES = (
    ("ttft_p95_s", "TTFT p95"),
    ("itl_p50_s", "ITL p50"),
    ("generation_tokens_per_s", "throughput"),
)


@dataclass(frozen=True)
class Effect:
    """What the what-if simulation predicts a change buys: quantities as simulated now and after, class after."""

    change: dict[str, float | str]
    now: dict[str, float | None]
    after: dict[str, float | None]
    bottleneck_after: str
    t: float = 0.0  # when it was predicted
    text: str = ""  # summary(), kept for the sinks that see the effect as a dict
    # past saturation: the capacity and how fast the queue grows, said instead of a TTFT with no steady value
    overload: str = ""
    after_p10: dict[str, float | None] = field(default_factory=dict)  # the 80 % interval of `after`
    after_p90: dict[str, float | None] = field(default_factory=dict)
    # where the prediction leaves what the server has shown, e.g. "batch 31 never seen (largest 5)"
    unseen: str = ""
    # what the window measured that its own, unchanged prediction misses widely: the prediction inherits that miss
    not_reproduced: str = ""
    # how the load met the server as simulated now: clients waiting for answers (a closed loop), or an open loop
    # past capacity; either way throughput is what the server gives, and a latency moved at the same throughput is
    # traded for another, not gained (whatif/relief.py)
    closed_loop: bool = False
    overloaded_now: bool = False

    @property
    def saturated(self) -> bool:
        """Throughput is the server's capacity now: only a change that raises it relieves the load."""
        return self.closed_loop or self.overloaded_now

    def summary(self) -> str:
        """`TTFT p95 7.3 s → ≈0.9 s (0.7–1.2), ITL p50 5 → ≈18 ms (15–22), throughput +170 % (+120…+230 %)`."""
        parts = []
        for key, label in EFFECT_QUANTITIES:
            a, b = self.now.get(key), self.after.get(key)
            if a is None or b is None or a <= 0:
                continue
            lo, hi = self.after_p10.get(key), self.after_p90.get(key)
            if not key.endswith("_per_s"):
                unit, k = ("ms", 1000.0) if max(a, b, hi or 0.0) < 1 else ("s", 1.0)
                span = f" ({_two(lo * k)}–{_two(hi * k)})" if lo is not None and hi is not None else ""
                parts.append(f"{label} {_two(a * k)} → ≈{_two(b * k)} {unit}{span}")
            else:
                span = (
                    f" ({(lo - a) / a:+.0%}…{(hi - a) / a:+.0%})" if lo is not None and hi is not None else ""
                )
                parts.append(f"{label} {(b - a) / a:+.0%}{span}")
        ranges = "; ranges are 80 % intervals" if self.after_p10 else ""
        unseen = f"; {self.unseen}" if self.unseen else ""
        missed = f"; the window itself not reproduced: {self.not_reproduced}" if self.not_reproduced else ""
        overload = f"; {self.overload}" if self.overload else ""
        return ", ".join(parts) + f" (then {self.bottleneck_after}){ranges}{unseen}{missed}{overload}"


def _two(x: float) -> str:
    """Two significant figures without an exponent: 0.12, 7.3, 18, 460."""
    return f"{x:.2g}" if abs(x) < 100 else f"{x:.0f}"


@dataclass(frozen=True)
class Advice:
    """One change an operator can make: the vLLM flag and what it buys, with numbers where known."""

    flag: str
    text: str
    source: str = ""  # where the numbers come from, e.g. "cache_config_info" or "model arithmetic"
    change: dict[str, float | str] | None = None  # the same change as `kvdoctor whatif --set` knobs
    effect: Effect | None = None  # what the what-if predicts it buys, when predicted


@dataclass
class Finding:
    """Something wrong on a (target, model): a limit hit, a preemption storm, a dead target…"""

    name: str
    severity: str
    summary: str
    description: str = ""
    evidence: dict[str, float | str] = field(default_factory=dict)
    advice: list[Advice] = field(default_factory=list)
    runbook: str = ""  # absolute once the pipeline has linked it (runbook_link)
    bottleneck: str = ""  # set when the finding is the limit itself (kv_cache, batch_cap, compute)
    since: float | None = None  # unix time the finding started to hold


@dataclass
class Diagnosis:
    """The current verdict for one (target, model_name) at evaluation time t."""

    target: str
    model_name: str
    t: float
    verdict: Verdict  # a limit (LIMITS) or a state (healthy, idle, unknown); a str is taken and checked
    since: float
    findings: list[Finding] = field(default_factory=list)
    evidence: dict[str, float | str] = field(default_factory=dict)
    advice: list[Advice] = field(default_factory=list)

    def __post_init__(self) -> None:
        # a verdict outside the vocabulary is a bug: fail where the diagnosis is made, not in a sink
        self.verdict = Verdict(self.verdict)

    @property
    def bottleneck(self) -> str:
        """The verdict under the name the API, /metrics and alerts have always used for it."""
        return self.verdict

    def to_dict(self) -> JsonObject:
        """A JSON-ready dict (NaN values become None); `bottleneck` repeats `verdict` for existing readers."""
        d = asdict(self)
        d["bottleneck"] = self.verdict
        cleaned: JsonObject = _clean(d)
        return cleaned


def _clean(v: Any) -> Any:
    if isinstance(v, float) and v != v:
        return None
    if isinstance(v, dict):
        return {k: _clean(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_clean(x) for x in v]
    return v


def runbook_link(page: str, runbook_url: str, name: str) -> str:
    """A finding's absolute runbook link: kvdoctor's own `/runbook#…` (or none: #name) on page; other URLs as given."""
    if not runbook_url:
        return f"{page}#{name}"
    if runbook_url == RUNBOOK_PATH or runbook_url.startswith(RUNBOOK_PATH + "#"):
        return page + runbook_url[len(RUNBOOK_PATH) :]
    return runbook_url
