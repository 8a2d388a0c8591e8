"""What a simulated run records: vLLM's metrics over the measured span, and an optional per-step trace."""

from __future__ import annotations

from typing import NamedTuple

from kvdoctor.whatif.model import Request, SimResult


class StepTrace(NamedTuple):
    """One scheduler step as it was scheduled (before its tokens were computed)."""

    start_s: float
    num_decoding: int  # decoding requests, each computing 1 + num_lookahead_tokens tokens
    num_prefill_tokens: int  # prompt (or recompute) tokens of the prefilling requests scheduled
    num_admitted: int  # waiting requests admitted in this step
    preempted: bool  # the step preempted someone (then it admitted nobody)
    num_waiting: int  # queue length after scheduling
    blocks_used: int  # referenced blocks after scheduling
    num_running: int  # running requests after scheduling, scheduled or not


class Recorder:
    """Accumulates a `SimResult` as vLLM's metrics would show it, counting only t in [warmup_s, end_s]."""

    __slots__ = ("end_s", "next_scrape_s", "peak", "queued", "result", "warmup_s")

    def __init__(self, duration_s: float, warmup_s: float, peak: tuple[float, float] | None = None) -> None:
        self.result = SimResult(span_s=duration_s)
        self.warmup_s, self.end_s = warmup_s, warmup_s + duration_s
        self.next_scrape_s = warmup_s
        self.queued = False  # requests waited after the last measured step
        # the busiest part [from, to] of a profile's span, recorded on its own as well (`SimResult.peak`)
        self.peak = Recorder(peak[1] - peak[0], peak[0]) if peak else None
        if self.peak is not None:
            self.result.peak = self.peak.result

    def within(self, now: float) -> bool:
        """Whether now lies in the measured span."""
        return self.warmup_s <= now <= self.end_s

    def step(
        self, now: float, duration: float, decoding: int, running: int, waiting: int, tokens: float
    ) -> bool:
        """A step that ended at now, with the running and waiting vLLM's gauges showed during it; True when it
        lies in the measured span (its tokens then count)."""
        if self.peak is not None:
            self.peak.step(now, duration, decoding, running, waiting, tokens)
        if not self.within(now):
            return False
        res = self.result
        if not res.steps:
            res.waiting_start = waiting
        res.waiting_end = waiting
        res.steps += 1
        in_span = min(duration, now - self.warmup_s)
        res.running_area += running * in_span
        res.waiting_area += waiting * in_span
        self.queued = waiting > 0
        if self.queued:
            res.queued_s += in_span
        res.running_max = max(res.running_max, running)
        if decoding:
            res.itl.append((duration, decoding))
            res.generation_tokens += tokens
        return True

    def prefill_done(self, request: Request, now: float) -> None:
        """A prefill (or a resumed request's recompute) produced a token at now: its first, or one more."""
        if self.peak is not None and self.peak.within(now):
            self.peak.prefill_done(request, now)
        res = self.result
        if request.num_output_tokens == 0:
            res.ttft.append(now - request.arrival_time)
        else:
            res.itl.append((now - request.last_token_time, 1))
        res.generation_tokens += 1

    def scheduled(self, request: Request, now: float) -> None:
        """The request was scheduled: its queue time ends at its first scheduling (a resume does not restart it)."""
        if request.first_scheduled_time < 0:
            request.first_scheduled_time = now

    def finished(self, request: Request, now: float) -> None:
        """A request finished in the measured span: counted, and its queue time observed now, as vLLM does.

        vLLM observes `request_queue_time_seconds` (with the prefill, decode and e2e times) when a request
        finishes (`PrometheusStatLogger.record`, per `finished_requests`), not when it is first scheduled: while a
        queue grows, the histogram shows the waits of requests queued one lifetime earlier."""
        if self.peak is not None and self.peak.within(now):
            self.peak.finished(request, now)
        res = self.result
        res.finished += 1
        res.queued_finished += self.queued
        res.queue.append(request.first_scheduled_time - request.queued_time)

    def preempted(self, now: float) -> None:
        """One preemption at now."""
        if self.peak is not None:
            self.peak.preempted(now)
        if self.within(now):
            self.result.preemptions += 1

    def scrape_kv(self, until: float, usage: float) -> None:
        """The 1 s scrapes of `vllm:kv_cache_usage_perc` up to until, all seeing usage."""
        if self.peak is not None:
            self.peak.scrape_kv(until, usage)
        while self.next_scrape_s <= until and self.next_scrape_s <= self.end_s:
            self.result.kv_samples.append(usage)
            self.next_scrape_s += 1.0
