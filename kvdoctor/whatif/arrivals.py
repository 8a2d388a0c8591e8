"""The requests a workload sends: a heap by arrival time; closed-loop clients re-issue after each answer."""

from __future__ import annotations

import heapq
import random
from collections.abc import Iterator

from kvdoctor.whatif.model import Engine, Request, Workload, make_request


class ArrivalQueue:
    """Arrivals by time (ties in given order); closed-loop clients think, then send their next request."""

    __slots__ = ("engine", "heap", "rng", "shared_prefix_tokens", "tie", "workload")

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

    def reissue(self, request: Request, now: float) -> None:
        """The client of a request answered (or refused) at now sends its next one after its think time."""
        w, rng = self.workload, self.rng
        if w is None or rng is None:
            return
        at = now + w.think_s
        nxt = make_request(rng, w, at, self.shared_prefix_tokens, self.engine, request.client)
        heapq.heappush(self.heap, (at, self.tie, nxt))
        self.tie += 1


def generate(
    w: Workload, engine: Engine, until_s: float, rng: random.Random, shared: int
) -> list[tuple[float, int, Request]]:
    """The initial arrivals: a Poisson process up to until_s (open loop), or each client's first request."""
    arrivals: list[tuple[float, int, Request]] = []
    if w.kind == "open":
        t, n = 0.0, 0
        while w.rate_per_s > 0:
            t += rng.expovariate(w.rate_per_s)
            if t > until_s:
                break
            arrivals.append((t, n, make_request(rng, w, t, shared, engine)))
            n += 1
    else:
        for i in range(w.population):
            t0 = rng.random() * max(w.think_s, 0.01)
            arrivals.append((t0, i, make_request(rng, w, t0, shared, engine, client=i)))
    return arrivals
