"""Value types of the what-if: engine settings, the step-time model, the workload, a simulated request's record."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvdoctor.whatif.blocks import FreedBlocks
    from kvdoctor.whatif.spec import Speculation

# vLLM's own histogram buckets (vllm/v1/metrics/loggers.py), used when a recording does not carry them.
# Data tables, kept as vLLM writes them (fmt: skip) rather than one number a line.
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)  # fmt: skip
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
               40.0, 80.0)  # fmt: skip
QUEUE_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
                 240.0, 480.0, 960.0, 1920.0, 7680.0)  # fmt: skip


@dataclass(frozen=True)
class Engine:
    """The scheduler and cache settings of one vLLM engine."""

    max_num_seqs: int = 128
    max_num_batched_tokens: int = 2048
    num_gpu_blocks: int = 1024  # as cache_config_info reports it; one is vLLM's reserved null block
    block_size: int = 16
    max_model_len: int = 4096
    num_speculative_tokens: int = 0  # draft tokens a decoding request may verify per step (0: no speculation)
    accepted_per_step: float = 1.0  # output tokens a decoding request gains per step (1 without speculation)
    draft_tokens_per_step: float = 0.0  # draft tokens a decoding request verifies per step, on average
    # … in the window the step times were learned from: their cost is already inside the fitted c_decode
    fitted_draft_tokens_per_step: float = 0.0
    speculation: Speculation | None = None  # the acceptance the window measured, when it speculated
    enable_prefix_caching: bool = True

    @property
    def usable_blocks(self) -> int:
        """Blocks requests can hold: all but the null block."""
        return max(1, self.num_gpu_blocks - 1)

    @property
    def kv_cache_tokens(self) -> int:
        """Token slots of the cache."""
        return self.num_gpu_blocks * self.block_size


@dataclass(frozen=True)
class StepModel:
    """Step time t = c0 + c_decode·decoding + c_prefill·prefill tokens + c_kv·context read + c_attn·prefill pairs.

    A prefill pair is one prefill token attending to one earlier token of its request: a chunk of n tokens after c
    computed ones makes n·(c + n/2) of them, so a long prompt costs more per token than a short one.
    """

    c0: float
    c_decode: float
    c_prefill: float
    c_kv: float = 0.0
    c_attn: float = 0.0
    source: str = ""  # "fit" (all from the data), "fit+structure", "fit+prior(roofline)"
    residual_ratio: float = math.nan  # relative RMS error of the fit on the history it came from
    points: int = 0  # distinct operating points (running levels) the fit saw
    notes: tuple[str, ...] = ()
    # where each of c0, c_decode, c_prefill, c_kv, c_attn came from: "data", "prior", "structure", "data+prior"…
    provenance: tuple[str, ...] = ()

    def duration(
        self, decoding: float, prefill_tokens: float, context_tokens: float, prefill_pairs: float = 0.0
    ) -> float:
        """Seconds one step takes."""
        return (
            self.c0
            + self.c_decode * decoding
            + self.c_prefill * prefill_tokens
            + self.c_kv * context_tokens
            + self.c_attn * prefill_pairs
        )

    def decode_scaled(self, factor: float) -> StepModel:
        """The same shape with the decode step's costs (per step, per decoder, per context token) times factor."""
        return replace(self, c0=self.c0 * factor, c_decode=self.c_decode * factor, c_kv=self.c_kv * factor)

    def scaled(self, factor: float) -> StepModel:
        """The same shape with every coefficient multiplied by factor."""
        return replace(
            self,
            c0=self.c0 * factor,
            c_decode=self.c_decode * factor,
            c_prefill=self.c_prefill * factor,
            c_kv=self.c_kv * factor,
            c_attn=self.c_attn * factor,
        )


@dataclass(frozen=True)
class LengthDist:
    """An empirical length distribution: (upper bound, cumulative probability) over histogram buckets."""

    bounds: tuple[tuple[float, float, float], ...]  # (low, high, cumulative fraction up to high)
    mean: float

    @classmethod
    def fixed(cls, n: int) -> LengthDist:
        """Every request has n tokens."""
        return cls(((n - 0.5, n + 0.5, 1.0),), float(n))


@dataclass(frozen=True)
class Workload:
    """Traffic as the metrics show it: open loop (arrival rate) or closed loop (a fixed population)."""

    kind: str  # "open" or "closed"
    rate_per_s: float  # open loop: arrivals per second
    population: int  # closed loop: concurrent clients
    think_s: float  # closed loop: delay between a client's answer and its next request
    prompt: LengthDist
    output: LengthDist
    prefix_hit_ratio: float = 0.0
    why: str = ""
    # where the window hit a shared prefix: the prompt tokens a request computed beyond it (vLLM's
    # request_prefill_kv_computed_tokens), so a prompt is that prefix plus its own tail
    computed: LengthDist | None = None
    # each engine's share of it where a data-parallel server's engines carried it unevenly (empty: evenly)
    shares: tuple[float, ...] = ()
    # an open loop whose rate was uneven across its window: each equal part's rate over the mean (empty: level)
    profile: tuple[float, ...] = ()
    # the length of the window the profile was read over: its time scale (a queue built in an overload grows with it)
    profile_span_s: float = 0.0

    def scaled(self, factor: float) -> Workload:
        """The same traffic grown by factor (more clients, or a higher rate)."""
        return replace(
            self, rate_per_s=self.rate_per_s * factor, population=max(1, round(self.population * factor))
        )

    def split_unevenly(self, replicas: int) -> bool:
        """Whether each of `replicas` engines is simulated with its own share (`shares` has one per engine)."""
        return len(self.shares) == replicas > 0

    def prefix_tokens(self, block_size: int) -> int:
        """The shared prefix every prompt starts with, in whole blocks (what the cache can hit)."""
        return round(self.prefix_hit_ratio * self.prompt.mean / block_size) * block_size


@dataclass
class SimResult:
    """What a simulated run shows over its measured span, in the shape vLLM's metrics give."""

    span_s: float
    ttft: list[float] = field(default_factory=list)
    queue: list[float] = field(default_factory=list)
    itl: list[tuple[float, int]] = field(
        default_factory=list
    )  # (step seconds, decoding requests in that step)
    generation_tokens: float = 0.0
    finished: int = 0
    preemptions: int = 0
    rejected: int = 0
    # ∫ running dt and ∫ waiting dt as vLLM's gauges show them: the counts after the last step's update
    running_area: float = 0.0
    waiting_area: float = 0.0
    kv_samples: list[float] = field(default_factory=list)  # usage at every 1 s "scrape"
    steps: int = 0
    running_max: int = 0
    waiting_start: int = 0  # queue length after the first measured step: with waiting_end, whether it grows
    waiting_end: int = 0
    # measured time with requests waiting, and the requests finished in it: the capacity where a queue came and went
    queued_s: float = 0.0
    queued_finished: int = 0
    # each engine's own run where a data-parallel server's engines carried uneven shares (`readout.simulate`)
    engine_runs: list[SimResult] = field(default_factory=list)
    # the busiest part's own record where the arrivals followed a profile: where a rising load meets its limit
    peak: SimResult | None = None


class Request:
    """One request as the scheduler sees it, with the field names of vLLM's `vllm/v1/request.py` `Request`."""

    __slots__ = (
        "admit_order",
        "arrival_time",
        "cached_segment",
        "client",
        "decode_from_computed",
        "decode_from_output",
        "decode_from_step",
        "epoch",
        "first_scheduled_time",
        "last_token_time",
        "max_tokens",
        "num_blocks",
        "num_cached_tokens",
        "num_computed_tokens",
        "num_new_tokens",
        "num_output_tokens",
        "num_prompt_tokens",
        "queued_time",
    )

    def __init__(self, arrival: float, prompt: int, out: int, hit: int = 0, client: int = -1) -> None:
        self.arrival_time, self.num_prompt_tokens, self.max_tokens = arrival, prompt, max(1, out)
        self.num_cached_tokens = hit  # prompt tokens served by the shared prefix (full blocks)
        self.client = client  # the closed-loop client that re-issues on finish (-1: open loop)
        self.num_computed_tokens = 0  # while prefilling; a decoder's follows from its decode_from_* fields
        self.num_output_tokens = 0
        self.num_new_tokens = 0  # scheduled in the current step
        self.num_blocks = 0  # blocks this request holds beyond the shared prefix
        self.admit_order = 0  # order of its latest admission: lockstep decoders allocate oldest first
        self.epoch = 0  # bumps on preemption and on finish, invalidating the lockstep events scheduled for it
        # a decoder advances in lockstep from (step, computed tokens, output tokens) at its first decode step
        self.decode_from_step, self.decode_from_computed, self.decode_from_output = 0, 0.0, 0.0
        # queue time: vLLM's QUEUED event (the engine core's add_request, at the step boundary after arrival) to
        # its first SCHEDULED one
        self.queued_time = arrival
        self.first_scheduled_time = -1.0
        self.last_token_time = 0.0
        self.cached_segment: FreedBlocks | None = (
            None  # its cached blocks in the free queue, after a preemption
        )


def sample_length(rng: random.Random, dist: LengthDist) -> int:
    """A length drawn from the empirical distribution, uniform within its bucket."""
    u = rng.random()
    for low, high, cum in dist.bounds:
        if u <= cum:
            return max(1, round(low + (high - low) * rng.random()))
    return max(1, round(dist.bounds[-1][1]))


def make_request(
    rng: random.Random, w: Workload, t: float, shared: int, e: Engine, client: int = -1
) -> Request:
    """A request of the workload arriving at t; `shared` tokens of its prompt are a cached common prefix."""
    # Where the window read a shared prefix, a prompt is that prefix and a tail drawn from the computed tokens'
    # histogram: the prompt histogram's coarse buckets (500-1000 for an 834-token prompt) would spread the tails,
    # the prefill chunks that share a step with the decoders, several times wider than they were.
    prefix = w.prefix_tokens(e.block_size) if w.computed is not None else 0
    drawn = prefix + sample_length(rng, w.computed) if w.computed is not None and prefix > 0 else 0
    prompt = min(drawn or sample_length(rng, w.prompt), e.max_model_len)
    out = sample_length(rng, w.output)
    hit = min(shared, (prompt - 1) // e.block_size * e.block_size)
    return Request(t, prompt, out, hit, client)
