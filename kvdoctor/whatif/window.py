"""A target's metrics as a time series of snapshots, and what a window of them measured (vLLM's own quantities)."""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from kvdoctor import vllm_metrics
from kvdoctor.promql.quantile import bucket_quantile
from kvdoctor.samples import Sample
from kvdoctor.sanity import RAW_MAX
from kvdoctor.vllm_metrics import BY_KEY

CACHE_INFO = BY_KEY["cache_config"].name
# One key per renamed quantity, its names newest first (never added together: the first present wins).
ALIASES = vllm_metrics.ALIASES
HISTOGRAMS = vllm_metrics.HISTOGRAMS
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
# One float per bucket bound, shared by every snapshot: a daemon keeps a retention of snapshots per target, each
# with ~200 bucket keys (at 2,000 targets, 15 s and 3 min, 5 million floats: 127 MB when each parses its own).
_BOUNDS: dict[str, float] = {}


@dataclass
class Snap:
    """One scrape of one target: flat values summed over engines, histograms by bucket, the cache info labels."""

    t: float
    flat: dict[str, float] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)
    info: dict[str, str] = field(default_factory=dict)
    engines: int = 0

    def get(self, key: str, default: float = math.nan) -> float:
        """A flat value by metric name or alias key."""
        for name in ALIASES.get(key, (key,)):
            if name in self.flat:
                return self.flat[name]
        return default


def _le(text: str) -> float | None:
    """A bucket's upper bound from its `le` label; None when it is no number (NaN included)."""
    try:
        bound = float(text)
    except ValueError:
        return None
    return None if math.isnan(bound) else bound


def snapshot(t: float, samples: Iterable[Sample]) -> Snap:
    """Fold one scrape's samples into a Snap (every engine and model summed; KV usage the highest engine's)."""
    s = Snap(t)
    flat, buckets = s.flat, s.buckets
    engines: set[str] = set()
    kinds = _KINDS
    last_base, last_b = "", {}  # a histogram's buckets come in a run: its dict is looked up once per run
    for name, labels, value, _ in samples:
        if not 0.0 <= value <= RAW_MAX:  # NaN, ±Inf, negative or absurd: nothing a simulation can use
            continue
        kind = kinds.get(name)
        if kind is None:
            kind = _kind(name)
        what, key = kind
        if what is _SUM:
            flat[key] = flat.get(key, 0.0) + value
        elif what is _BUCKET:
            le = None
            for k, v in labels:
                if k == "le":
                    le = v
                    break
            if le is None:
                continue
            if key is not last_base:
                b = buckets.get(key)
                if b is None:
                    b = buckets[key] = {}
                last_base, last_b = key, b
            bound = _BOUNDS.get(le)
            if bound is None:
                bound = _le(le)
                if bound is None:  # no number: histogram_quantile skips such a bucket too
                    continue
                if len(_BOUNDS) < 10_000:
                    _BOUNDS[le] = bound
            last_b[bound] = last_b.get(bound, 0.0) + value
        elif what is _MAX:
            flat[key] = max(flat.get(key, 0.0), value)
        elif what is _SPLIT:  # kept per label value as well as summed (_SPLIT_BY says which label, and why)
            label, default = _SPLIT_BY[key]
            per = _split(key, label, dict(labels).get(label, default))
            flat[per] = flat.get(per, 0.0) + value
            flat[key] = flat.get(key, 0.0) + value
        elif what is _INFO:
            info = dict(labels)
            engines.add(info.get("engine", "0"))
            s.info = s.info or info
    s.engines = len(engines)
    return s


# What a sample name adds to a Snap, decided once per name rather than once per sample (a target prints the same
# few hundred names every scrape): how it is folded in, and under which key. The loop compares kinds by identity.
_SKIP, _SUM, _BUCKET, _MAX, _SPLIT, _INFO = "skip", "sum", "bucket", "max", "split", "info"
RUNNING, WAITING = "vllm:num_requests_running", "vllm:num_requests_waiting"
WAITING_BY_REASON = "vllm:num_requests_waiting_by_reason"
DEFERRED = f'{WAITING_BY_REASON}{{reason="deferred"}}'
# what is kept per label value beside the sum: (label, its value when the sample has none)
_SPLIT_BY = {
    PER_POSITION: ("position", ""),  # speculative decoding's acceptance per draft position
    WAITING_BY_REASON: ("reason", ""),  # why the queue waits: only those waiting for capacity meet a cap
    RUNNING: ("engine", "0"),  # a data-parallel server's engines (whatif/plateau.py)
    WAITING: ("engine", "0"),
}

_KINDS: dict[str, tuple[str, str]] = {}
_KV = frozenset(ALIASES["kv"])
_HISTOGRAMS = frozenset(HISTOGRAMS)


def _kind(name: str) -> tuple[str, str]:
    if name.endswith("_bucket"):
        base = name[:-7]
        kind = (_BUCKET, base) if base in _HISTOGRAMS else (_SKIP, "")
    elif name == CACHE_INFO:
        kind = (_INFO, "")
    elif not name.startswith("vllm:") and name != "process_start_time_seconds":
        kind = (_SKIP, "")
    elif name in _SPLIT_BY:
        kind = (_SPLIT, name)
    elif name in _KV:
        kind = (_MAX, name)
    else:
        kind = (_SUM, name)
    if len(_KINDS) < 10_000:  # a fleet prints a few hundred names; a hostile target's are not all kept
        _KINDS[name] = kind
    return kind


def deferred(snap: Snap) -> float:
    """Requests vLLM (0.20 on) defers for a transient constraint (a LoRA adapter's slot, a KV transfer), which no
    batch cap or cache size holds back."""
    return snap.flat.get(DEFERRED, 0.0)


def waiting_for_capacity(snap: Snap) -> float:
    """Requests waiting for a seat or blocks: all that wait, less those deferred."""
    return max(0.0, snap.get(WAITING, 0.0) - deferred(snap))


_SPLITS: dict[tuple[str, str, str], str] = {}


def _split(key: str, label: str, value: str) -> str:
    """The flat key of one part of a split value, one string however many snapshots hold it (a daemon keeps a
    retention of them per target)."""
    got = _SPLITS.get((key, label, value))
    if got is None:
        got = f'{key}{{{label}="{value}"}}'
        if len(_SPLITS) < 10_000:  # a hostile target's label values are not all kept
            _SPLITS[(key, label, value)] = got
    return got


def engine_ids(snap: Snap) -> list[str]:
    """The engines whose running gauge the scrape carried, in order."""
    prefix = f'{RUNNING}{{engine="'
    return sorted(k[len(prefix) : -2] for k in snap.flat if k.startswith(prefix))


def per_engine(snap: Snap, name: str, engine: str) -> float:
    """One engine's value of a gauge kept per engine (RUNNING, WAITING)."""
    return snap.flat.get(_split(name, "engine", engine), 0.0)


def hist_name(snap: Snap, key: str) -> str:
    """The histogram family a snapshot carries for an alias key (or the key itself)."""
    return next((n for n in ALIASES.get(key, (key,)) if n in snap.buckets), key)


def delta_buckets(a: Snap, b: Snap, name: str) -> dict[float, float]:
    """Cumulative bucket counts observed between two snapshots."""
    hb, ha = b.buckets.get(name, {}), a.buckets.get(name, {})
    return {le: max(0.0, c - ha.get(le, 0.0)) for le, c in hb.items()}


def delta(a: Snap, b: Snap, key: str) -> float:
    """Increase of a counter between two snapshots (0 when absent)."""
    va, vb = a.get(key, 0.0), b.get(key, 0.0)
    return max(0.0, vb - va)


def quantile_of(buckets: dict[float, float], q: float) -> float:
    """histogram_quantile over a bucket dict (NaN when it holds no observation)."""
    return bucket_quantile(q, list(buckets.items())) if buckets else math.nan


def mean_of(a: Snap, b: Snap, name: str) -> float:
    """Mean observation of a histogram between two snapshots (its _sum over its _count)."""
    n = delta(a, b, f"{name}_count")
    return delta(a, b, f"{name}_sum") / n if n > 0 else math.nan


@dataclass
class Quantities:
    """What a server shows (or a simulation predicts) over a window."""

    ttft_p50_s: float = math.nan
    ttft_p95_s: float = math.nan
    itl_p50_s: float = math.nan
    itl_p95_s: float = math.nan
    queue_time_p95_s: float = math.nan
    generation_tokens_per_s: float = math.nan
    requests_per_s: float = math.nan
    running: float = math.nan
    waiting: float = math.nan
    kv_usage_max: float = math.nan
    preemptions_per_s: float = math.nan
    bottleneck: str = "unknown"

    def to_dict(self) -> dict[str, float | str | None]:
        """JSON-ready, NaN as None, floats rounded to what the metrics can tell."""
        out: dict[str, float | str | None] = {}
        for k, v in self.__dict__.items():
            if isinstance(v, float):
                out[k] = None if not math.isfinite(v) else float(f"{v:.4g}")
            else:
                out[k] = v
        return out


def in_window(snaps: list[Snap], start: float, end: float) -> list[Snap]:
    """The snapshots with start ≤ t ≤ end."""
    return [s for s in snaps if start - 1e-6 <= s.t <= end + 1e-6]


def measure(snaps: list[Snap]) -> Quantities:
    """The quantities a window of snapshots (first to last) measured."""
    a, b = snaps[0], snaps[-1]
    dt = max(b.t - a.t, 1e-9)
    itl = hist_name(b, "itl")
    ttft = delta_buckets(a, b, "vllm:time_to_first_token_seconds")
    itl_b = delta_buckets(a, b, itl)
    queue = delta_buckets(a, b, "vllm:request_queue_time_seconds")
    kv = [s.get("kv") for s in snaps if not math.isnan(s.get("kv"))]
    return Quantities(
        ttft_p50_s=quantile_of(ttft, 0.5),
        ttft_p95_s=quantile_of(ttft, 0.95),
        itl_p50_s=quantile_of(itl_b, 0.5),
        itl_p95_s=quantile_of(itl_b, 0.95),
        queue_time_p95_s=quantile_of(queue, 0.95),
        generation_tokens_per_s=delta(a, b, "vllm:generation_tokens_total") / dt,
        requests_per_s=delta(a, b, "vllm:request_success_total") / dt,
        running=_mean(s.get("vllm:num_requests_running") for s in snaps),
        waiting=_mean(s.get("vllm:num_requests_waiting") for s in snaps),
        kv_usage_max=max(kv) if kv else math.nan,
        preemptions_per_s=delta(a, b, "vllm:num_preemptions_total") / dt,
    )


# the pack's light load (kvdoctor:itl_seconds:light_load_p50): a minute with at most this many running, none waiting;
# at the start of the scrapes, as little as a window holds (kvdoctor:window:ready: a scrape 15 s old)
LIGHT_RUNNING, LIGHT_SPAN_S, LIGHT_MIN_S = 2.0, 60.0, 15.0


def light_itl(snaps: list[Snap]) -> float | None:
    """The light-load ITL p50 as the pack's baseline reads it: vLLM's ITL p50 over each minute, (t - 1m, t], with at
    most 2 running and none waiting, their median; None where the snapshots have no such minute. As Prometheus'
    range, a minute at the start of the snapshots holds those there are (LIGHT_MIN_S of them at least)."""
    times = [s.t for s in snaps]
    busy = [0]  # scrapes past light load among the first k
    for s in snaps:
        light = s.get(RUNNING, 0.0) <= LIGHT_RUNNING and s.get(WAITING, 0.0) <= 0
        busy.append(busy[-1] + (not light))
    found = []
    for j, b in enumerate(snaps):
        first = bisect.bisect_right(times, b.t - LIGHT_SPAN_S)  # the minute's first scrape
        if busy[j + 1] - busy[first] > 0:
            continue
        base = max(first - 1, 0)  # the increase since the scrape before it, or since the first there is
        long_enough = b.t - snaps[base].t >= LIGHT_MIN_S
        itl = delta_buckets(snaps[base], b, hist_name(b, "itl")) if long_enough else {}
        if itl.get(math.inf, 0.0) > 0:
            found.append(quantile_of(itl, 0.5))
    found = [v for v in found if math.isfinite(v) and v > 0]
    return statistics.median(found) if found else None


def _mean(values: Iterable[float]) -> float:
    vs = [v for v in values if not math.isnan(v)]
    return sum(vs) / len(vs) if vs else math.nan


def in_flight(s: Snap) -> float:
    """Requests in the engine at the scrape: running + waiting."""
    return s.get("vllm:num_requests_running", 0.0) + s.get("vllm:num_requests_waiting", 0.0)
