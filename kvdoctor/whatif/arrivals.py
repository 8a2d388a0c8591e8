"""The requests a workload sends: a heap by arrival time; closed-loop clients re-issue after each answer."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator

from kvdoctor.whatif.model import Engine, Request, Workload, make_request
from kvdoctor.whatif.profile import warp

MAX_REFUSALS = 1000  # a closed-loop client's requests refused in a row before it stops: under 0.1 % would fit


class ArrivalQueue:
    """Arrivals by time (ties in given order); closed-loop clients think, then send their next request."""

    __slots__ = ("engine", "heap", "refused", "rng", "shared_prefix_tokens", "tie", "workload")

    def __init__(
        self,
        arrivals: list[tuple[float, int, Request]],
        engine: Engine,
        workload: Workload | None = None,
        rng: random.Random | None = None,
        shared_prefix_tokens: int = 0,
    ) -> None:
        heapq.heapify(arrivals)
        self.heap, self.engine, self.rng = arrivals, engine, rng
        self.workload = (
            workload if workload is not None and workload.kind == "closed" and rng is not None else None
        )
        self.shared_prefix_tokens = shared_prefix_tokens
        self.tie = len(arrivals)
        self.refused: dict[int, int] = {}  # closed-loop client → its requests refused in a row

    def __bool__(self) -> bool:
        return bool(self.heap)

    def next_time(self) -> float:
        """When the next request arrives (the queue must not be empty)."""
        return self.heap[0][0]

    def pop_due(self, now: float) -> Iterator[Request]:
        """The requests that have arrived by now, in arrival order."""
        heap = self.heap
        while heap and heap[0][0] <= now:
            yield heapq.heappop(heap)[2]

    def reissue(self, request: Request, now: float, refused: bool = False) -> None:
        """The client of a request answered (or refused) at now sends its next one after its think time; one
        refused MAX_REFUSALS times in a row stops (no length it draws fits the engine)."""
        w, rng = self.workload, self.rng
        if w is None or rng is None:
            return
        if refused:
            # without thinking, a client whose every request is refused would re-send at the same instant forever
            count = self.refused[request.client] = self.refused.get(request.client, 0) + 1
            if count >= MAX_REFUSALS:
                return
        else:
            self.refused.pop(request.client, None)
        at = now + w.think_s
        nxt = make_request(rng, w, at, self.shared_prefix_tokens, self.engine, request.client)
        heapq.heappush(self.heap, (at, self.tie, nxt))
        self.tie += 1


def generate(
    w: Workload, engine: Engine, until_s: float, rng: random.Random, shared: int, measured_from_s: float = 0.0
) -> list[tuple[float, int, Request]]:
    """The initial arrivals: a Poisson process up to until_s (open loop), or each client's first request.

    The open loop is the Poisson process given its count: the warm-up and the measured span (from measured_from_s)
    each get rate × length arrivals at uniform random times; where the window's rate was uneven (`Workload.profile`)
    the measured span's follow its profile and the warm-up runs at the rate the window began with."""
    arrivals: list[tuple[float, int, Request]] = []
    if w.kind == "open":
        # the window counted its requests: a fresh Poisson count would add its own ±1/√n (±6 % over a 2-minute
        # run at 2 req/s) to the tokens/s the simulation reads, an error the window never had
        spans = ((0.0, min(measured_from_s, until_s)), (max(0.0, measured_from_s), until_s))
        shapes = (w.profile[:1], w.profile)
        owns = [random.Random(rng.getrandbits(64)) for _ in spans]
        for (lo, hi), shape, own in zip(spans, shapes, owns, strict=True):
            arrivals += _given_count(w, engine, lo, hi, own, shared, len(arrivals), shape)
    else:
        for i in range(w.population):
            t0 = rng.random() * max(w.think_s, 0.01)
            arrivals.append((t0, i, make_request(rng, w, t0, shared, engine, client=i)))
    return arrivals


def _given_count(
    w: Workload,
    engine: Engine,
    lo: float,
    hi: float,
    rng: random.Random,
    shared: int,
    n0: int,
    shape: tuple[float, ...] = (),
) -> list[tuple[float, int, Request]]:
    """rate × (hi − lo) arrivals at uniform times in [lo, hi): a unit-rate process's first n points over its n+1st;
    with a shape (relative rates of equal parts), as many as its mean gives, at times warped to follow it.

    Drawn a gap then a request at a time, so at another rate the same seed gives the same requests, each at its time
    scaled by the rates' ratio (as a Poisson process' would be): the loads a headroom bisects share their draws."""
    expected = max(0.0, w.rate_per_s * (hi - lo) * (sum(shape) / len(shape) if shape else 1.0))
    count = int(expected) + (rng.random() < expected - int(expected))
    points, at = [], 0.0
    for _ in range(count):
        at += rng.expovariate(1.0)
        points.append((at, make_request(rng, w, lo, shared, engine)))
    total = at + rng.expovariate(1.0)
    scale = (hi - lo) / total
    out = []
    for i, (p, req) in enumerate(points):
        req.arrival_time = lo + (hi - lo) * warp(p / total, shape) if shape else lo + p * scale
        out.append((req.arrival_time, n0 + i, req))
    return out
