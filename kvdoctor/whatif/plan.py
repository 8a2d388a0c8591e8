"""The cheapest flags and replicas that hold every SLO at a load, and the load at which today's config breaks each.

Flags cost nothing; replicas cost GPU-hours. So the search is over replica counts: each flag combination (fewest
changes first) gets the smallest replica count that holds every SLO, and a combination that cannot beat the best so
far with one replica fewer is dominated and dropped after that one simulation. Headroom bisects the load multiple
of today's configuration per SLO; simulations are cached by (flags, replicas, load), so the SLOs share them. A
bisection's probes near capacity tip with the draw, so the headroom is the median of three draws' (seeds').
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Any

from kvdoctor.whatif import flags, intervals, knobs
from kvdoctor.whatif.canary import might_hold
from kvdoctor.whatif.candidates import Candidate, Changes, Plan, Predicted, rounded
from kvdoctor.whatif.learn import run_key
from kvdoctor.whatif.members import step_draws
from kvdoctor.whatif.model import Engine, SimResult, StepModel, Workload
from kvdoctor.whatif.predict import Basis, quantities, simulate
from kvdoctor.whatif.readout import classify
from kvdoctor.whatif.saturation import as_dict, detect
from kvdoctor.whatif.slo import extra_value, holds, margin

MAX_REPLICAS = 64
# headroom is reported as "at least this" beyond it; a light step of a real ramp broke its SLOs at ×10-×60
MAX_LOAD = 64.0
MIN_LOAD = 1 / 16
LOAD_PRECISION = 1.05  # bisection stops when the bracket is this ratio wide
# posterior step models drawn for the headroom's 80 % interval; only the two pricing a full batch cheapest and
# dearest are simulated, which of 9 draws are on average its 10th and 90th percentiles (order statistics 1/10, 9/10)
BAND_DRAWS = 9
BAND_PRECISION = 1.10  # … bisected coarser: an interval's end needs no 5 % (one run fewer per SLO and draw)
# simulation draws (seeds) a headroom is the median of: near capacity one draw's arrivals tip a bisection's probe
HEADROOM_DRAWS = 3


class Planner:
    """Simulations of one learned window under flag changes, replica counts and load multiples (cached)."""

    def __init__(
        self,
        basis: Basis,
        slos: dict[str, float],
        *,
        gpu_memory_bytes: float | None = None,
        gpu_hour_usd: float | None = None,
        gpus_per_replica: int = 1,
    ) -> None:
        self.basis, self.slos = basis, slos
        self.gpu_memory_bytes, self.gpu_hour_usd, self.gpus = gpu_memory_bytes, gpu_hour_usd, gpus_per_replica
        self.simulations = 0
        self.precision = LOAD_PRECISION
        self.draws = HEADROOM_DRAWS
        self._reseeded: list[Planner] = []  # the next seeds' planners, made as a headroom needs them
        self.skipped = 0  # combinations left out because a change in them bought nothing on its own
        self._cache: dict[tuple[Any, ...], Candidate] = {}
        self._runs: dict[tuple[Any, ...], SimResult] = {}  # this search's runs, by what a replica simulates
        self._inert: set[tuple[str, float | str]] = set()
        now = self._candidate({}, basis.engine, basis.workload, basis.replicas, basis.now)
        self._cache[self._key({}, basis.replicas, 1.0)] = now  # the window's own simulation: today's at ×1

    @staticmethod
    def _key(changes: Changes, replicas: int, load: float) -> tuple[Any, ...]:
        return (tuple(sorted(changes.items())), replicas, round(load, 4))

    def evaluate(self, changes: Changes, replicas: int, load: float) -> Candidate:
        """Simulate one configuration at a load multiple of the window's traffic (cached)."""
        key = self._key(changes, replicas, load)
        if key in self._cache:
            return self._cache[key]
        b = self.basis
        all_changes: Changes = {**changes, "replicas": replicas, "load": load}
        engine, workload, n, _ = knobs.apply(
            b.engine, b.workload, b.replicas, all_changes, b.info, self.gpu_memory_bytes
        )
        res = self._run(engine, workload, n, self.basis.probe_duration(workload, n))
        self._cache[key] = cand = self._candidate(changes, engine, workload, n, res)
        return cand

    def _run(self, engine: Engine, workload: Workload, replicas: int, duration_s: float) -> SimResult:
        """One replica's simulation, once per distinct run (`learn.run_key`), the window's own and its predictions'
        included (the same seeded numbers); kept for this search only."""
        key = run_key(engine, workload, replicas, duration_s)
        res = self._runs.get(key) or self.basis.runs.get(key)
        if res is None:
            res = simulate(engine, self.basis.step, workload, replicas, duration_s, self.basis.seed)
            self.simulations += 1
            self._runs[key] = res
        return res

    def _candidate(self, changes: Changes, engine: Engine, w: Workload, n: int, res: SimResult) -> Candidate:
        b = self.basis
        q = quantities(res, n, b.buckets, b.sigma)
        q.bottleneck = classify(res, q, engine, b.light_itl_s, n, b.buckets, b.sigma)
        overload = detect(res, w, n)
        carried = {**q.to_dict(), **as_dict(overload)}
        extra = tuple(
            (k, rounded(extra_value(k, res, b.buckets, b.sigma))) for k in self.slos if k not in carried
        )
        predicted = Predicted(q, overload, extra)
        # a queue that grows while the overload lasts breaks every latency objective: no value of it holds
        values = {k: None if overload else predicted.value(k) for k in self.slos}
        margins = {k: margin(v, self.slos[k]) for k, v in values.items()}
        meets = all(holds(v, self.slos[k]) for k, v in values.items())
        cand = Candidate(dict(changes), n, predicted, margins, meets)
        if self.gpu_hour_usd is not None:
            cand.cost_per_hour_usd = self.gpu_hour_usd * self.gpus * n
            tps = q.generation_tokens_per_s
            if math.isfinite(tps) and tps > 0:
                cand.cost_per_1m_generation_tokens_usd = cand.cost_per_hour_usd / (tps * 3600) * 1e6
        return cand

    def headroom(self, key: str) -> float:
        """The load multiple at which today's configuration breaks this SLO: the median of `draws` simulation draws'
        bisections (MAX_LOAD when beyond); a draw that cannot move the median is not simulated."""
        got: list[float] = []
        for i in range(self.draws):
            if i == len(self._reseeded) + 1:  # the next seed, with its own runs
                self._reseeded.append(self._under(self.basis.step, self.basis.seed + i, self.precision))
            got.append((self._reseeded[i - 1] if i else self).bisect(key))
            if any(got.count(v) * 2 > self.draws for v in got):
                break  # most draws bisected to the same bracket: that is the median
        return statistics.median(got)

    @property
    def simulated(self) -> int:
        """Simulations run for this planner, its other draws' included."""
        return self.simulations + sum(1 + p.simulations for p in self._reseeded)

    def bisect(self, key: str) -> float:
        """The load multiple at which this draw breaks the SLO (MAX_LOAD when beyond)."""
        r = self.basis.replicas

        def breaks(m: float) -> bool:
            left = self.evaluate({}, r, m).margins[key]  # None: no value, or overloaded
            return left is None or left < 0

        if breaks(1.0):
            lo, hi = MIN_LOAD, 1.0
            if breaks(lo):
                return 0.0
        else:
            lo, hi = 1.0, 2.0
            while not breaks(hi):
                if hi >= MAX_LOAD:
                    return MAX_LOAD
                lo, hi = hi, min(MAX_LOAD, hi * 2)
        while hi / lo > self.precision:
            mid = math.sqrt(lo * hi)
            lo, hi = (lo, mid) if breaks(mid) else (mid, hi)
        return math.sqrt(lo * hi)

    def spread(self) -> tuple[Planner, Planner] | None:
        """Planners of today's window under the posterior step models that price a full batch cheapest and dearest
        (its p10 and p90 step cost there); None when the fit has no posterior to draw from."""
        b = self.basis
        draws = step_draws(b.rows, b.physical, BAND_DRAWS, b.seed, b.step, b.itl_scale)
        if all(d == b.step for d in draws):
            return None
        # a full batch of decoders, each holding a mean prompt and half its output: the batch a breaking load nears
        n = b.engine.max_num_seqs
        context = n * (b.workload.prompt.mean + b.workload.output.mean / 2)
        draws.sort(key=lambda d: d.duration(n, 0.0, context))
        return self._under(draws[0], b.seed, BAND_PRECISION), self._under(draws[-1], b.seed, BAND_PRECISION)

    def _under(self, step: StepModel, seed: int, precision: float) -> Planner:
        """This planner's window and objectives under another step model or seed (its own runs and cache; one
        draw's bisection)."""
        b = self.basis
        now = simulate(b.engine, step, b.workload, b.replicas, b.duration_s, seed)
        under = Planner(
            replace(b, step=step, seed=seed, now=now),
            self.slos,
            gpu_memory_bytes=self.gpu_memory_bytes,
            gpu_hour_usd=self.gpu_hour_usd,
            gpus_per_replica=self.gpus,
        )
        under.precision, under.draws = precision, 1
        return under

    def search(self, load: float, gpu: bool = False) -> tuple[Candidate | None, list[Candidate]]:
        """The cheapest feasible candidate (None when none is) and every candidate simulated, in order."""
        best: Candidate | None = None
        tried: list[Candidate] = []
        for changes in flags.combinations(self.basis, self.gpu_memory_bytes if gpu else None):
            limit = best.replicas - 1 if best else MAX_REPLICAS
            if limit < 1:
                break
            if len(changes) > 1 and any(item in self._inert for item in changes.items()):
                self.skipped += 1
                continue
            found = self._fewest_replicas(changes, load, limit, tried, double=best is None and not changes)
            if found is not None:
                best = found
        return best, tried

    def replicas_needed(self, load: float = 1.0) -> int | None:
        """The fewest replicas of today's flags that hold every SLO at the load (None: not up to MAX_REPLICAS)."""
        found = self.fewest_replicas({}, load)
        return found.replicas if found is not None else None

    def fewest_replicas(self, changes: Changes, load: float) -> Candidate | None:
        """The cheapest candidate of these flags holding every SLO at the load (None: not up to MAX_REPLICAS)."""
        return self._fewest_replicas(changes, load, MAX_REPLICAS, [], double=True)

    def _fewest_replicas(
        self, changes: Changes, load: float, limit: int, tried: list[Candidate], double: bool = False
    ) -> Candidate | None:
        """The fewest replicas ≤ limit holding every SLO for these flags; one simulation when it cannot."""

        def at(n: int) -> Candidate:
            c = self.evaluate(changes, n, load)
            if c not in tried:
                tried.append(c)
            return c

        if not double:  # a rival to beat (or none found): dominated unless it holds at the limit
            c = at(limit)
            if len(changes) == 1 and c.predicted == self.evaluate({}, limit, load).predicted:
                self._inert.update(changes.items())  # alone it bought nothing
            if not c.meets:
                return None
            lo, hi = 1, limit
        else:  # double up from today's share of the load, then bisect
            hi = max(1, math.ceil(self.basis.replicas * load))
            if at(hi).meets:
                lo = 1
            else:
                while not at(hi).meets:
                    if hi >= MAX_REPLICAS:
                        return None
                    hi = min(MAX_REPLICAS, hi * 2)
                lo = hi // 2 + 1
        while lo < hi:
            mid = (lo + hi) // 2
            lo, hi = (lo, mid) if at(mid).meets else (mid + 1, hi)
        return at(hi)


def plan(planner: Planner, load: float, gpu: bool = False) -> Plan:
    """Today's headroom and prediction, then the cheapest configuration holding every SLO at the load."""
    current = planner.evaluate({}, planner.basis.replicas, load)
    headroom = {k: planner.headroom(k) for k in planner.slos}
    low, high = dict(headroom), dict(headroom)
    drawn = planner.spread()
    for under in drawn or ():
        for k in planner.slos:  # the point is inside: two draws are an estimate of where p10 and p90 lie
            h = under.bisect(k)
            low[k], high[k] = min(low[k], h), max(high[k], h)
    best, tried = planner.search(load, gpu)
    canary = might_hold(best, tried, drawn[0].evaluate, load) if best is not None and drawn else None
    notes = []
    if best is None:
        closest = max(c.worst() for c in tried)
        near = [c for c in tried if c.worst() >= closest - 0.05 * abs(closest)]  # within 5 %: the cheaper one
        best = min(near, key=lambda c: (c.replicas, len(c.changes)))
        notes.append(f"no candidate up to {MAX_REPLICAS} replicas holds every SLO; the closest is shown")
    else:
        notes.append(
            "a combination that could not beat the pick with one replica fewer was dropped after that try"
        )
    basis = planner.basis
    missed = intervals.not_reproduced(basis.unchanged_quantities(basis.duration_s), basis.measured, None)
    if missed:  # the model misread the window: every candidate's prediction inherits the miss
        notes.insert(0, "the window itself is not reproduced: " + "; ".join(missed))
    if planner.skipped:
        notes.append(
            f"{planner.skipped} combination(s) not tried: a change in them bought nothing on its own"
        )
    rate = planner.basis.workload.rate_per_s
    simulations = planner.simulated + sum(1 + u.simulations for u in drawn or ())  # 1: each draw's ×1 run
    return Plan(
        dict(planner.slos),
        load,
        current,
        headroom,
        best,
        tried,
        simulations,
        best.meets,
        notes,
        rate,
        headroom_p10=low,
        headroom_p90=high,
        might_hold=canary,
    )
