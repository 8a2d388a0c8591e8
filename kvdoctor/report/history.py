"""What a report is built from: per (target, model) hourly summaries and class segments, from any source.

Recordings, Prometheus and the daemon all feed `Step`s (one evaluation of one target/model, holding for `dt`
seconds) into a `History`; the history keeps only hourly sums and run-length class segments, so the daemon can
keep weeks of it in its state file.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Protocol

from kvdoctor.errors import InputError
from kvdoctor.jsondoc import JsonObject
from kvdoctor.report.steps import Step, opt, step_from_diagnosis
from kvdoctor.verdicts import LIMITS, Diagnosis

CLASSES = ("kv_cache", "batch_cap", "compute", "healthy", "idle", "unknown", "down")
BINS = 20  # distribution bins over 0-1 (KV usage, running / cap), 5 % wide
MAX_HOURS = 24 * 15  # the daemon keeps two weeks and a day per target: room for a weekly review
MAX_SEGMENTS = 4000
Key = tuple[str, str]  # (target, model_name)
Matrix = list[tuple[dict[str, str], list[tuple[float, float]]]]  # (labels, [(t, value)]) per series


class ReportError(InputError):
    """Input the report cannot be built from (an empty range, no traffic, an unknown target); says what and why."""


class RangeClient(Protocol):
    """What the report needs of a Prometheus client (kvdoctor.sources.client.PromClient is one); errors pass through."""

    base: str

    def query_range(self, expr: str, start: float, end: float, step: float) -> Matrix:
        """expr evaluated over [start, end] every step seconds."""
        ...

    def query_range_samples(self, expr: str, t: float) -> Matrix:
        """The raw samples of a range selector expr at t."""
        ...


@dataclass
class Hour:
    """Sums over one UTC hour of one (target, model)."""

    start: int
    seconds: dict[str, float] = field(default_factory=dict)
    requests: float = 0.0
    prompt_tokens: float = 0.0
    generation_tokens: float = 0.0
    kv_max: float = 0.0
    running_max: float = 0.0
    waiting_max: float = 0.0
    cap: float = 0.0
    util_max: float = 0.0  # running / cap
    gen_tps_max: float = 0.0
    itl_ratio_max: float = 0.0  # ITL p50 / light-load baseline
    saturated_s: float = 0.0  # seconds in a limit class with a token rate
    saturated_tokens: float = 0.0  # generation tokens/s × dt over those seconds
    kv_bins: list[float] = field(default_factory=lambda: [0.0] * BINS)  # seconds per KV usage bin
    util_bins: list[float] = field(default_factory=lambda: [0.0] * BINS)  # seconds per running/cap bin


@dataclass
class Segment:
    """A run of one class on one (target, model): [start, end), the explaining finding, the peaks within."""

    start: float
    end: float
    cls: str
    finding: str = ""
    peak: dict[str, float] = field(default_factory=dict)


@dataclass
class KeyHistory:
    """The hours and segments of one (target, model)."""

    hours: dict[int, Hour] = field(default_factory=dict)
    segments: list[Segment] = field(default_factory=list)


def _bin(x: float) -> int | None:
    # a value that is no fraction (±Inf, NaN) has no bin: it is left out, never an OverflowError for the fleet
    return min(BINS - 1, max(0, int(x * BINS))) if math.isfinite(x) else None


def _max(a: float, b: float | None) -> float:
    return a if b is None or not math.isfinite(b) else max(a, b)


class History:
    """Hourly summaries and class segments per (target, model); `add` steps in time order per key."""

    def __init__(self, source: str = "") -> None:
        self.source = source
        self.keys: dict[Key, KeyHistory] = {}
        self._named: dict[str, list[str]] = {}  # target -> its model names, in the order they showed

    def add(self, target: str, model: str, s: Step) -> None:
        """Account one step; a step crossing an hour boundary is split by time."""
        kh = self.keys.setdefault(self._key(target, model), KeyHistory())
        t, end = s.t, s.t + s.dt
        while t < end - 1e-9:
            hour = int(t // 3600) * 3600
            part = min(end, hour + 3600) - t
            self._hour(kh, hour, s, part, part / s.dt)
            t += part
        self._segment(kh, s)

    def resolve(self, target: str, model: str) -> Key:
        """The key a step of (target, model) is accounted under: a step without a model name (metrics missing at
        start-up, the target down) under the one model the target serves, when it serves exactly one."""
        if model:
            return target, model
        named = self._named.get(target, ())
        return (target, named[0]) if len(named) == 1 else (target, "")

    def _key(self, target: str, model: str) -> Key:
        # the same replica before and after its model name showed: never a second one billed beside it
        key = self.resolve(target, model)
        if model and key not in self.keys:
            named = self._named.setdefault(target, [])
            if not named and (target, "") in self.keys:
                self.keys[key] = self.keys.pop((target, ""))
            named.append(model)
        return key

    def _hour(self, kh: KeyHistory, start: int, s: Step, dt: float, share: float) -> None:
        h = kh.hours.get(start)
        if h is None:
            h = kh.hours[start] = Hour(start)
        h.seconds[s.cls] = h.seconds.get(s.cls, 0.0) + dt
        h.requests += s.requests * share
        h.prompt_tokens += s.prompt_tokens * share
        h.generation_tokens += s.generation_tokens * share
        h.kv_max, h.running_max = _max(h.kv_max, s.kv), _max(h.running_max, s.running)
        h.waiting_max, h.cap = _max(h.waiting_max, s.waiting), _max(h.cap, s.cap)
        h.gen_tps_max = _max(h.gen_tps_max, s.gen_tps)
        kv_bin = _bin(s.kv) if s.kv is not None else None
        if kv_bin is not None:
            h.kv_bins[kv_bin] += dt
        util = s.running / s.cap if s.cap and s.running is not None else None
        util_bin = _bin(util) if util is not None else None
        if util is not None and util_bin is not None:
            h.util_max = max(h.util_max, util)
            h.util_bins[util_bin] += dt
        if s.itl_p50 and s.itl_baseline and math.isfinite(s.itl_p50 / s.itl_baseline):
            h.itl_ratio_max = max(h.itl_ratio_max, s.itl_p50 / s.itl_baseline)
        if s.cls in LIMITS and s.gen_tps and math.isfinite(s.gen_tps):
            h.saturated_s += dt
            h.saturated_tokens += s.gen_tps * dt
        if len(kh.hours) > MAX_HOURS:
            del kh.hours[min(kh.hours)]

    def _segment(self, kh: KeyHistory, s: Step) -> None:
        gauges = {
            "kv": s.kv,
            "running": s.running,
            "waiting": s.waiting,
            "cap": s.cap,
            "preemptions_per_s": s.preemptions_per_s,
            "gen_tps": s.gen_tps,
        }
        peak = {k: v for k, v in gauges.items() if v is not None and math.isfinite(v)}
        last = kh.segments[-1] if kh.segments else None
        if last is not None and last.cls == s.cls and abs(last.end - s.t) <= max(1.0, 0.5 * s.dt):
            last.end = s.t + s.dt
            last.finding = last.finding or s.finding
            for k, v in peak.items():
                last.peak[k] = max(last.peak.get(k, v), v)
            return
        kh.segments.append(Segment(s.t, s.t + s.dt, s.cls, s.finding, peak))
        if len(kh.segments) > MAX_SEGMENTS:
            del kh.segments[0]

    def observe(self, diagnoses: list[Diagnosis], t: float, dt: float) -> dict[str, str]:
        """Account one daemon cycle (tokens and requests from the 1m rates: the daemon keeps no counters); returns
        target -> why its step failed, for one target's values never cost the others theirs."""
        failed: dict[str, str] = {}
        for d in diagnoses:
            try:
                s = step_from_diagnosis(d, t, dt)
                ev = d.evidence
                s.requests, s.prompt_tokens, s.generation_tokens = (
                    _num(ev.get(k)) * dt
                    for k in ("requests_per_s", "prompt_tokens_per_s", "generation_tokens_per_s")
                )
                self.add(d.target, d.model_name, s)
            except Exception as exc:
                failed.setdefault(d.target, f"{type(exc).__name__}: {exc}")
        return failed

    def span(self) -> tuple[float, float] | None:
        """First and last second covered by any segment."""
        segs = [s for kh in self.keys.values() for s in kh.segments]
        return (min(s.start for s in segs), max(s.end for s in segs)) if segs else None

    def to_state(self) -> JsonObject:
        """Compact JSON-ready data for the state file (distribution bins sparse, segments as lists)."""
        keys = [
            {
                "target": k[0],
                "model_name": k[1],
                "hours": [_hour_state(h) for h in kh.hours.values()],
                "segments": [[s.start, s.end, s.cls, s.finding, s.peak] for s in kh.segments],
            }
            for k, kh in self.keys.items()
        ]
        return {"source": self.source, "keys": keys}

    @classmethod
    def from_state(cls, state: JsonObject) -> History:
        """A history saved by to_state(); malformed entries are dropped."""
        h = cls(str(state.get("source", "")))
        h.restore(state)
        return h

    def restore(self, state: JsonObject) -> None:
        """Load the keys saved by to_state() (a malformed entry is dropped, the others kept)."""
        for item in state.get("keys") or []:
            try:
                hours = {}
                for x in item["hours"]:
                    x = dict(x)
                    for b in ("kv_bins", "util_bins"):
                        x[b] = _dense(x.get(b, []))
                    hour = Hour(**x)
                    _finite_hour(hour)
                    hours[int(x["start"])] = hour
                segments = [
                    Segment(float(s[0]), float(s[1]), str(s[2]), str(s[3]), _finite_dict(s[4]))
                    for s in item["segments"]
                    if math.isfinite(float(s[0])) and math.isfinite(float(s[1]))
                ]
                target, model = str(item["target"]), str(item["model_name"])
                if model and (target, model) not in self.keys:
                    self._named.setdefault(target, []).append(model)
                self.keys[(target, model)] = KeyHistory(hours, segments)
            except (KeyError, TypeError, ValueError, IndexError):
                continue


def _hour_state(h: Hour) -> JsonObject:
    d = asdict(h)
    for b in ("kv_bins", "util_bins"):
        d[b] = [[i, s] for i, s in enumerate(d[b]) if s]
    return d


def _dense(pairs: list[list[float]]) -> list[float]:
    bins = [0.0] * BINS
    for i, s in pairs:
        bins[int(i)] = _num(s)
    return bins


def _finite_hour(h: Hour) -> None:
    """Zero what a state file holds that no sum can be (Infinity, NaN, null, negative): one bad value, not a 500."""
    for name, v in list(vars(h).items()):
        if name == "seconds":
            h.seconds = _finite_dict(v)
        elif name != "start":
            setattr(h, name, [_num(x) for x in v] if name.endswith("_bins") else _num(v))


def _finite_dict(d: object) -> dict[str, float]:
    return {str(k): float(v) for k, v in dict(d).items() if opt(v) is not None}  # type: ignore[call-overload]


def _num(v: object) -> float:
    return opt(v) or 0.0
