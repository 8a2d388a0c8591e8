"""What a window teaches once (workload, engine, step model, jitter, the unchanged run), and a cache of it.

Every change's prediction, the relief check and every headroom probe of one window start from the same learned
window: learning it (the step-model fit, the workload, the unchanged simulation) is most of a prediction's cost.
`learned` keeps the last few, keyed by the pickled arguments themselves, so a window is learned once per process
however many changes and probes ask, and two calls share a `Basis` only when their histories, windows and settings
are the same bytes (the same snapshot objects asked again are known by identity: a snapshot is never changed once
made). A `Basis` also keeps what its predictions repeat: the unchanged side's run at another length,
the step models drawn from the fit's posterior and the interval members of the unchanged side (all seeded: the same numbers again).
"""

from __future__ import annotations

import hashlib
import math
import pickle
import threading
import weakref
from collections import OrderedDict
from dataclasses import dataclass, field, replace
from typing import Any

from kvdoctor.capacity.arch import ModelSpec
from kvdoctor.capacity.presets import GpuSpec
from kvdoctor.whatif import histo
from kvdoctor.whatif.breaks import stalls
from kvdoctor.whatif.calibration import calibrated
from kvdoctor.whatif.ledger import Recall, merged
from kvdoctor.whatif.model import (
    ITL_BUCKETS,
    QUEUE_BUCKETS,
    TTFT_BUCKETS,
    Engine,
    SimResult,
    StepModel,
    Workload,
)
from kvdoctor.whatif.plateau import load_shares
from kvdoctor.whatif.prior import physical_prior
from kvdoctor.whatif.readout import WARMUP_S, quantities, simulate
from kvdoctor.whatif.stepfit import Row, fit_rows, history_rows
from kvdoctor.whatif.window import Quantities, Snap, delta_buckets, hist_name, light_itl, measure
from kvdoctor.whatif.workload import WindowError, bound_duration, infer_engine, infer_workload

MIN_SIM_S, MAX_SIM_S = 120.0, 600.0
MIN_REQUESTS = 600
# learned windows kept per process: a target's changes and probes come together, a few targets apart
LEARNED = 8


@dataclass
class Basis:
    """What a window teaches once: workload, engine, step model, buckets, jitter; many simulations reuse it."""

    workload: Workload
    engine: Engine
    step: StepModel
    replicas: int
    info: dict[str, str]
    measured: Quantities
    duration_s: float
    buckets: dict[str, tuple[float, ...]]
    sigma: float
    now: SimResult
    notes: list[str]
    seed: int = 0
    rows: list[Row] = field(default_factory=list)  # the step fit's rows, refitted resampled for the intervals
    physical: StepModel | None = None  # the roofline prior the fit leaned on, if any
    span_s: float = 0.0  # the window's length
    recalled_batch: float = 0.0  # the largest decoding batch the step ledger's rows added to the history's
    # the light-load ITL a class is judged against, the history's as the pack reads it (None: none, its cold start)
    light_itl_s: float | None = None
    # the factor on the decode costs that matched the window's mean ITL (calibration.py; 1: none applied)
    itl_scale: float = 1.0
    # what the predictions of this window repeat, computed on first use (seeded, so the same numbers again); not
    # init fields, so a replace() with another step or seed starts its own
    runs: dict[tuple[Any, ...], SimResult] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    member_steps: list[StepModel] | None = field(default=None, init=False, repr=False, compare=False)
    members_now: dict[float, list[Quantities]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    read: dict[float, Quantities] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.runs[run_key(self.engine, self.workload, self.replicas, self.duration_s)] = self.now

    def run(self, engine: Engine, workload: Workload, replicas: int, duration_s: float) -> SimResult:
        """`simulate` with this window's step model and seed, once per distinct run (`run_key`)."""
        key = run_key(engine, workload, replicas, duration_s)
        res = self.runs.get(key)
        if res is None:
            res = self.runs[key] = simulate(engine, self.step, workload, replicas, duration_s, self.seed)
        return res

    def probe_duration(self, w: Workload, replicas: int) -> float:
        """The simulated seconds of another load on this window: its own, fewer where an open loop brings the
        ~MIN_REQUESTS the quantiles need sooner; a profile keeps its window's time scale at every load, as `whatif`
        simulates it (`readout.simulate`): in fewer seconds its peak, and the queue built there, would shrink."""
        share = w.rate_per_s / replicas
        if w.kind != "open" or share <= 0:
            return self.duration_s
        # memory stays bounded at ×64 too
        duration = (
            self.duration_s if w.profile else min(self.duration_s, max(MIN_SIM_S, MIN_REQUESTS / share))
        )
        return bound_duration([(w, replicas)], duration, WARMUP_S)[0]

    def unchanged(self, duration_s: float) -> SimResult:
        """Today's configuration simulated for duration_s (the window's own run at its length)."""
        return self.run(self.engine, self.workload, self.replicas, duration_s)

    def unchanged_quantities(self, duration_s: float) -> Quantities:
        """`unchanged(duration_s)` read through the server's buckets (a copy: the caller sets its bottleneck)."""
        q = self.read.get(duration_s)
        if q is None:
            q = quantities(self.unchanged(duration_s), self.replicas, self.buckets, self.sigma)
            self.read[duration_s] = q
        return replace(q)


def run_key(engine: Engine, w: Workload, replicas: int, duration_s: float) -> tuple[Any, ...]:
    """What `simulate` feeds one replica (the step model and seed are the window's): the engine, its share of the
    traffic and the length. So n replicas at ×1 are one replica at ×1/n, and a closed loop's loads that round to one
    population are one run: an open loop's population, a closed loop's rate and the `why` are never read."""
    share = w.scaled(1.0 / replicas) if replicas > 1 and not w.split_unevenly(replicas) else w
    closed = share.kind == "closed"
    rate, population = (0.0, share.population) if closed else (share.rate_per_s, 0)
    return engine, replace(share, rate_per_s=rate, population=population, why=""), duration_s


def learn(
    history: list[Snap],
    window: list[Snap],
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    seed: int = 0,
    model: ModelSpec | None = None,
    gpu: GpuSpec | None = None,
    recall: Recall | None = None,
) -> Basis:
    """Learn workload and engine from the window, step times from the history (and the target's step ledger, for
    the bins the history does not show), and simulate it unchanged."""
    if len(window) < 5:
        raise WindowError(f"{len(window)} scrapes in the window; the what-if needs at least 5")
    workload = infer_workload(window)
    engine, notes = infer_engine(window, max_num_seqs, max_num_batched_tokens)
    notes += [
        f"the engine stalled {window[b - 1].t - window[a].t:.0f} s in the window (requests in flight, no token): a "
        "frozen engine, not load; the simulation has no stall, so what the window measured includes one it does not"
        for a, b in stalls(window)
    ]
    physical = None
    if model is not None and gpu is not None:
        physical = physical_prior(model, gpu, _kv_bytes_per_token(window[-1].info))
        if physical is None:
            notes.append(
                f"no roofline prior: the {gpu.name} preset has no bandwidth/FLOP/s or the model no size"
            )
    own = history_rows(history, engine.max_num_batched_tokens)
    rows, ledger_note = merged(own, recall, window[-1].t)
    if ledger_note:
        notes.append(ledger_note)
    recalled = max((x[1] for x, _, _ in rows[len(own) :]), default=0.0)
    try:
        step = fit_rows(rows, physical)
    except ValueError as exc:
        raise WindowError(str(exc)) from None
    replicas = max(1, window[-1].engines)
    shares = load_shares(window)
    if len(shares) == replicas:
        workload = replace(workload, shares=shares)
    measured = measure(window)
    span = window[-1].t - window[0].t
    # long enough for the tail quantiles to settle: a few hundred finished requests, twice the window's; a profile is
    # simulated as whole windows (`readout.simulate`), once where one holds them
    windows = 1 if workload.profile else 2
    duration = min(
        MAX_SIM_S, max(MIN_SIM_S, windows * span, MIN_REQUESTS / max(measured.requests_per_s, 1e-3))
    )
    duration, bound_note = bound_duration([(workload, replicas)], duration, WARMUP_S)
    if bound_note:
        notes.append(bound_note)
    buckets = _bounds(window[-1])
    res_now = simulate(engine, step, workload, replicas, duration, seed)
    step, res_now, cal = calibrated(engine, step, workload, replicas, duration, seed, window, res_now)
    itl_scale = cal.scale if cal is not None else 1.0
    notes += [cal.note()] if cal is not None else []
    a, b = window[0], window[-1]
    sigma = histo.fit_sigma(res_now.itl, buckets["itl"], delta_buckets(a, b, hist_name(b, "itl")))
    info = window[-1].info
    return Basis(
        workload,
        engine,
        step,
        replicas,
        info,
        measured,
        duration,
        buckets,
        sigma,
        res_now,
        notes,
        seed,
        rows,
        physical,
        span,
        recalled,
        light_itl(history),
        itl_scale,
    )


_cache: OrderedDict[bytes, Basis] = OrderedDict()
_cache_lock = threading.Lock()
# the key of the same snapshots asked again (a look's reliefs, a plan's probes), by identity: pickling a history
# costs more than the rest of a cached call. Weak references, checked on a hit, make a reused id no match without
# keeping a history alive (the simulation child unpickles a new one for every request)
_keys: OrderedDict[tuple[tuple[int, ...], tuple[int, ...], bytes], tuple[bytes, list[weakref.ref[Snap]]]] = (
    OrderedDict()
)


def _key(history: list[Snap], window: list[Snap], settings: tuple[object, ...]) -> bytes:
    """The cache key: a digest of the arguments' bytes, found by identity when these very snapshots were keyed."""
    given = pickle.dumps(settings, pickle.HIGHEST_PROTOCOL)
    ident = (tuple(map(id, history)), tuple(map(id, window)), given)
    snaps = [*history, *window]
    with _cache_lock:
        known = _keys.get(ident)
        if known is not None and all(r() is s for r, s in zip(known[1], snaps, strict=True)):
            _keys.move_to_end(ident)
            return known[0]
    key = hashlib.sha256(pickle.dumps((history, window, given), pickle.HIGHEST_PROTOCOL)).digest()
    with _cache_lock:
        _keys[ident] = (key, [weakref.ref(s) for s in snaps])
        while len(_keys) > LEARNED:
            _keys.popitem(last=False)
    return key


def learned(
    history: list[Snap],
    window: list[Snap],
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
    seed: int = 0,
    model: ModelSpec | None = None,
    gpu: GpuSpec | None = None,
    recall: Recall | None = None,
) -> Basis:
    """`learn`, once per distinct call among the last LEARNED (the same Basis to every caller; do not mutate it)."""
    settings = (max_num_seqs, max_num_batched_tokens, seed, model, gpu, recall)
    key = _key(history, window, settings)
    with _cache_lock:
        basis = _cache.get(key)
        if basis is not None:
            _cache.move_to_end(key)
            return basis
    basis = learn(
        history,
        window,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        seed=seed,
        model=model,
        gpu=gpu,
        recall=recall,
    )
    with _cache_lock:
        _cache[key] = basis
        while len(_cache) > LEARNED:
            _cache.popitem(last=False)
    return basis


def _kv_bytes_per_token(info: dict[str, str]) -> float:
    try:
        return float(info["kv_cache_memory_bytes"]) / float(info["kv_cache_size_tokens"])
    except (KeyError, ValueError, ZeroDivisionError):
        return 0.0


def _bounds(snap: Snap) -> dict[str, tuple[float, ...]]:
    def finite(name: str, default: tuple[float, ...]) -> tuple[float, ...]:
        b = sorted(le for le in snap.buckets.get(name, {}) if math.isfinite(le))
        return tuple(b) or default

    return {
        "ttft": finite("vllm:time_to_first_token_seconds", TTFT_BUCKETS),
        "itl": finite(hist_name(snap, "itl"), ITL_BUCKETS),
        "queue": finite("vllm:request_queue_time_seconds", QUEUE_BUCKETS),
    }
