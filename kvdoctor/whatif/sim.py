"""A discrete-step simulation of one vLLM V1 engine: arrivals into `scheduler.Scheduler`, step after step.

The scheduler mirrors `vllm/v1/core/sched/scheduler.py`; `kvcache.KVCacheManager` and `blocks.BlockPool` the
block accounting; `lockstep.DecodeEvents` lets decoders advance without being touched every step; the step
time comes only from the `StepModel`.
"""

from __future__ import annotations

import random

from kvdoctor.acyclic import acyclic
from kvdoctor.whatif.arrivals import ArrivalQueue, generate
from kvdoctor.whatif.kvcache import KVCacheManager
from kvdoctor.whatif.model import Engine, Request, SimResult, StepModel, Workload
from kvdoctor.whatif.profile import busiest_span
from kvdoctor.whatif.scheduler import Scheduler
from kvdoctor.whatif.simstats import Recorder, StepTrace
from kvdoctor.whatif.workload import WindowError

__all__ = ["MAX_STEPS", "Simulator", "StepTrace", "run_until"]

# steps one run may take: ten minutes of 0.6 ms steps, past any engine's; a step model that a lying target's
# counters made nearly free would otherwise step without end, and hold the one simulation child every target shares
MAX_STEPS = 1_000_000


class Simulator:
    """Runs one engine with a step-time model; deterministic for a given seed."""

    def __init__(self, engine: Engine, step: StepModel, *, prefix_hit_ratio: float = 0.0) -> None:
        self.engine, self.step = engine, step
        self.prefix_hit_ratio = prefix_hit_ratio
        self.trace: list[StepTrace] | None = None  # set to [] to get one StepTrace per step

    def run_workload(self, w: Workload, duration_s: float, warmup_s: float, seed: int = 0) -> SimResult:
        """Simulate warmup_s + duration_s of the workload; metrics cover the last duration_s."""
        rng = random.Random(seed)
        block_size = self.engine.block_size
        # the traffic's shared prefix is hit only where the engine caches prefixes
        ratio = self.prefix_hit_ratio if self.engine.enable_prefix_caching else 0.0
        shared = round(ratio * w.prompt.mean / block_size) * block_size
        arrivals = generate(w, self.engine, warmup_s + duration_s, rng, shared, warmup_s)
        return self.run(arrivals, duration_s, warmup_s, w, rng, shared)

    def run(
        self,
        arrivals: list[tuple[float, int, Request]],
        duration_s: float,
        warmup_s: float = 0.0,
        workload: Workload | None = None,
        rng: random.Random | None = None,
        shared: int = 0,
    ) -> SimResult:
        """Simulate the given (time, tie, request) arrivals (a closed-loop workload re-issues from rng);
        metrics after warmup_s. `shared` prompt tokens are a common prefix every request hits."""
        scheduler = self.scheduler(arrivals, duration_s, warmup_s, workload, rng, shared)
        run_until(scheduler, warmup_s + duration_s)
        return scheduler.recorder.result

    def scheduler(
        self,
        arrivals: list[tuple[float, int, Request]],
        duration_s: float,
        warmup_s: float = 0.0,
        workload: Workload | None = None,
        rng: random.Random | None = None,
        shared: int = 0,
    ) -> Scheduler:
        """The engine's scheduler over the arrivals, before its first step (`run` without running it)."""
        queue = ArrivalQueue(arrivals, self.engine, workload, rng, shared)
        # where the arrivals follow a profile, its busiest part is recorded on its own too: the class is judged there
        profile = workload.profile if workload is not None else ()
        peak = busiest_span(warmup_s, warmup_s + duration_s, profile) if profile else None
        recorder = Recorder(duration_s, warmup_s, peak)
        engine = self.engine
        kv = KVCacheManager(engine.usable_blocks, engine.block_size, shared, engine.enable_prefix_caching)
        return Scheduler(self.engine, self.step, kv, queue, recorder, self.trace)


def run_until(scheduler: Scheduler, end_s: float) -> None:
    """Step the scheduler until end_s, jumping over idle gaps; stops early once nothing is left to arrive."""
    # A run allocates a few small containers per step while holding every pending arrival: the cyclic
    # collector would walk that heap again and again for nothing (a request and its cached segment are the
    # only cycle, broken when the request is readmitted), a tenth of a run's time. Refcounting frees the rest.
    with acyclic():
        while scheduler.now < end_s:
            scheduler.add_arrived()
            if scheduler.idle:
                if not scheduler.arrivals:
                    return
                scheduler.idle_until(min(scheduler.arrivals.next_time(), end_s))
                continue
            if scheduler.step_index >= MAX_STEPS:
                raise WindowError(
                    f"the simulation took {MAX_STEPS:,} steps to reach {scheduler.now:.3g} s of {end_s:.3g} s: "
                    f"the step times learned ({scheduler.step_model.c0 * 1e3:.3g} ms a step) are no engine's; "
                    "are the ITL histogram's _count and _sum right?"
                )
            scheduler.step()
