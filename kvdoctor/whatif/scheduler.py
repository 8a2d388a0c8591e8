"""One engine step of vLLM's V1 scheduler: `vllm/v1/core/sched/scheduler.py` `Scheduler.schedule()` (FCFS
policy), the model's forward pass as a `StepModel.duration`, then `Scheduler.update_from_output()`.

Running requests first in admission order, chunked prefill under `max_num_batched_tokens`, at most
`max_num_seqs` running, blocks of `block_size` allocated on demand, preemption of the most recently admitted
request (blocks freed, computed tokens reset to 0, back to the front of the queue), no admission in a step
that preempted, head-of-line blocking when the queue's head cannot get blocks, prefix-cache hits on full
blocks. Decoding requests advance in lockstep (`lockstep.DecodeEvents`), so a step touches a decoding request
only when it needs a new block or finishes.
"""

from __future__ import annotations

from collections import deque

from kvdoctor.whatif.arrivals import ArrivalQueue
from kvdoctor.whatif.kvcache import KVCacheManager
from kvdoctor.whatif.lockstep import DecodeEvents
from kvdoctor.whatif.model import Engine, Request, StepModel
from kvdoctor.whatif.running import Running
from kvdoctor.whatif.simstats import Recorder, StepTrace
from kvdoctor.whatif.spec import verify_cost


class Scheduler:
    """The scheduler state of one engine and its step; deterministic for given arrivals."""

    def __init__(
        self,
        engine: Engine,
        step_model: StepModel,
        kv_cache_manager: KVCacheManager,
        arrivals: ArrivalQueue,
        recorder: Recorder,
        trace: list[StepTrace] | None = None,
    ) -> None:
        self.engine, self.step_model, self.kv_cache_manager = engine, step_model, kv_cache_manager
        self.arrivals, self.recorder, self.trace = arrivals, recorder, trace
        self.block_size = engine.block_size
        self.max_num_scheduled_tokens = engine.max_num_batched_tokens
        self.max_num_running_reqs = engine.max_num_seqs
        self.num_lookahead_tokens = engine.num_speculative_tokens
        self.accepted_per_step = engine.accepted_per_step
        self.waiting: deque[Request] = deque()
        self.running = Running()
        self.decode_events = DecodeEvents(
            engine.block_size, engine.accepted_per_step, engine.num_speculative_tokens
        )
        self.draft_cost = verify_cost(engine, step_model)  # per decoding request, beyond the fitted step time
        self.preempted_reqs: list[Request] = []  # in the current step
        self.token_budget, self.now, self.step_index = 0, 0.0, 0
        # the KV read per step: decoders' computed tokens past their cached shared prefix, and that prefix once while
        # any decoder holds it (the same blocks, read once a step: what prefix caching saves a decode step)
        self.decode_context_tokens, self.decoders_sharing, self.shared_prefix_tokens = 0.0, 0, 0
        self.next_admit_order = 0
        # what vLLM's running, waiting and KV usage gauges show during a step: their values after the last step's
        # update (`make_stats`), so a request is not yet running in the step that admits it
        self.shown_running, self.shown_waiting, self.shown_usage = 0, 0, 0.0

    def add_arrived(self) -> None:
        """Queue every request that has arrived by now (vLLM's `add_request`), refusing what can never fit."""
        for request in self.arrivals.pop_due(self.now):
            if request.num_prompt_tokens + request.max_tokens > self.engine.max_model_len:
                # vLLM answers 400 before scheduling: prompt + max_tokens over max_model_len
                self._refuse(request)
            else:
                request.queued_time = self.now
                self.waiting.append(request)

    def _refuse(self, request: Request) -> None:
        """vLLM answers the client an error: counted, and a closed-loop client sends its next request."""
        self.recorder.result.rejected += 1
        self.arrivals.reissue(request, self.now, refused=True)

    @property
    def idle(self) -> bool:
        """Nothing running and nothing waiting."""
        return not self.waiting and not self.running.decoding and not self.running.prefilling

    def idle_until(self, until: float) -> None:
        """Jump over an idle gap: the scrapes in it see an empty cache."""
        self.recorder.scrape_kv(until, 0.0)
        self.now = until

    def step(self) -> None:
        """Schedule one step, run it for its step-model duration, and apply its output."""
        self.token_budget = self.max_num_scheduled_tokens
        self.preempted_reqs.clear()
        num_decoding = self._schedule_running_decodes()
        num_prefilling = self._schedule_running_prefills()
        # vLLM: "Next, schedule the WAITING requests", only `if not preempted_reqs`
        num_admitted = 0 if self.preempted_reqs else self._schedule_waiting()
        scheduled = self.running.prefilling[: num_prefilling + num_admitted]
        prefill_tokens, context_tokens, prefill_pairs = self._prefill_shape(scheduled)
        read = self.decode_context_tokens + self.shared_prefix_tokens * (self.decoders_sharing > 0)
        duration = (
            self.step_model.duration(num_decoding, prefill_tokens, read + context_tokens, prefill_pairs)
            + num_decoding * self.draft_cost
        )
        if self.trace is not None:
            shape = (num_decoding, prefill_tokens, num_admitted, bool(self.preempted_reqs), len(self.waiting))
            used = self.kv_cache_manager.block_pool.used
            self.trace.append(StepTrace(self.now, *shape, used, len(self.running)))
        in_span = self._advance(duration, num_decoding)
        usage = self.shown_usage  # what the scrapes during this step read
        self._update_from_output(scheduled, in_span)
        self.recorder.scrape_kv(self.now, usage)

    def _schedule_running_decodes(self) -> int:
        """The decoding half of `schedule()`'s "First, schedule the RUNNING requests" loop; returns how many.

        Each decoder takes 1 + num_lookahead_tokens of the budget. Only those crossing a block boundary this
        step call the allocator, oldest first; one that cannot get a block preempts the youngest running one.
        """
        decoding = self.running.decoding
        per_request = 1 + self.num_lookahead_tokens
        self.token_budget -= len(decoding) * per_request
        events, kv = self.decode_events, self.kv_cache_manager
        pool, step, lookahead = kv.block_pool, self.step_index, self.num_lookahead_tokens
        # the hottest loop of a run (one pass per block a decoder fills): methods bound once
        computed_tokens, blocks_needed, allocate, arm_block = (
            events.computed_tokens,
            kv.num_blocks_needed,
            kv.allocate,
            events.arm_block,
        )
        for _, request, epoch in events.pop_block_due(step):
            if request.epoch != epoch:
                continue  # preempted since the event was set, maybe just now to make room for an older one
            num_blocks = blocks_needed(request, computed_tokens(request, step) + 1 + lookahead)
            if num_blocks > pool.free and not self._make_room(request, num_blocks):
                break
            allocate(request, num_blocks)
            arm_block(request, step + 1)  # its next block, from the next step on
        # preemptions above may have removed decoders: their share of the budget comes back
        self.token_budget = self.max_num_scheduled_tokens - len(decoding) * per_request
        return len(decoding)

    def _schedule_running_prefills(self) -> int:
        """The prefilling half of the RUNNING loop: each a chunk of what budget remains; returns how many."""
        prefilling, kv = self.running.prefilling, self.kv_cache_manager
        index = 0
        while index < len(prefilling) and self.token_budget > 0:
            request = prefilling[index]
            num_tokens = request.num_prompt_tokens + request.num_output_tokens
            num_new_tokens = min(num_tokens - request.num_computed_tokens, self.token_budget)
            num_blocks = kv.num_blocks_needed(request, request.num_computed_tokens + num_new_tokens)
            if num_blocks > kv.block_pool.free and not self._make_room(request, num_blocks):
                break
            kv.allocate(request, num_blocks)
            request.num_new_tokens = num_new_tokens
            self.token_budget -= num_new_tokens
            index += 1
        return index

    def _make_room(self, request: Request, num_blocks: int) -> bool:
        """`schedule()`'s loop around a failed `allocate_slots`: preempt the youngest running request until
        num_blocks are free; False when request itself was the one preempted (it cannot be scheduled)."""
        pool = self.kv_cache_manager.block_pool
        while num_blocks > pool.free:
            victim = self.running.youngest()
            self._preempt_request(victim)
            if victim is request:
                return False
        return True

    def _preempt_request(self, request: Request) -> None:
        """vLLM's `_preempt_request`: free its blocks, reset its computed tokens, requeue it at the front."""
        running = self.running
        if running.prefilling and running.prefilling[-1] is request:
            running.prefilling.pop()
            num_computed_tokens = request.num_computed_tokens
        else:
            running.decoding.pop()
            events = self.decode_events
            num_computed_tokens = int(events.computed_tokens(request, self.step_index))
            self._stop_reading(request, num_computed_tokens)
            request.num_output_tokens = int(events.output_tokens(request, self.step_index))
            # it decoded in the step that just ended: its resume's token is that far from this one (vLLM's ITL)
            request.last_token_time = self.now
        # full blocks stay cached for its resume; the partial one is lost
        self.kv_cache_manager.free(request, num_computed_tokens)
        request.num_computed_tokens = 0
        request.epoch += 1
        self.waiting.appendleft(request)
        self.preempted_reqs.append(request)
        self.recorder.preempted(self.now)

    def _schedule_waiting(self) -> int:
        """`schedule()`'s "Next, schedule the WAITING requests": admit from the queue's head while the budget,
        `max_num_seqs` and the blocks allow; the head blocks the rest. Returns how many were let in."""
        waiting, running, kv = self.waiting, self.running, self.kv_cache_manager
        admitted = 0
        # the running list's length without a Python-level __len__: this loop runs every step of every run
        seats = self.max_num_running_reqs - len(running.decoding) - len(running.prefilling)
        while waiting and self.token_budget > 0 and admitted < seats:
            request = waiting[0]
            num_tokens = request.num_prompt_tokens + request.num_output_tokens
            # a full cache's head is refused step after step: at once where even all it held could not fit it
            short = kv.surely_short(request, self.token_budget)
            num_cached_blocks = 0 if short else kv.get_computed_blocks(request)
            request.num_computed_tokens = request.num_cached_tokens + num_cached_blocks * self.block_size
            num_new_tokens = min(num_tokens - request.num_computed_tokens, self.token_budget)
            num_slots = request.num_computed_tokens + num_new_tokens
            if short or not kv.allocate_new(request, num_cached_blocks, num_slots):
                request.num_computed_tokens = 0
                if not running:
                    # alone it still does not fit: vLLM would never schedule it, the client gets an error
                    waiting.popleft()
                    self._refuse(request)
                    continue
                break
            waiting.popleft()
            request.num_new_tokens = num_new_tokens
            request.admit_order = self.next_admit_order
            self.next_admit_order += 1
            self.recorder.scheduled(request, self.now)
            running.prefilling.append(request)
            self.token_budget -= num_new_tokens
            admitted += 1
        return admitted

    @staticmethod
    def _prefill_shape(scheduled: list[Request]) -> tuple[int, int, float]:
        """Prefill tokens, the context they attend to, and prefill pairs (`StepModel`) of a step's chunks."""
        prefill_tokens = context_tokens = 0
        prefill_pairs = 0.0
        for request in scheduled:
            chunk, computed = request.num_new_tokens, request.num_computed_tokens
            prefill_tokens += chunk
            context_tokens += computed + chunk
            prefill_pairs += chunk * (computed + chunk / 2)
        return prefill_tokens, context_tokens, prefill_pairs

    def _advance(self, duration: float, num_decoding: int) -> bool:
        """The forward pass: time moves on by the step's duration, every decoder by accepted_per_step tokens.
        Records the step; True when it ended in the measured span."""
        self.now += duration
        self.step_index += 1
        gained = num_decoding * self.accepted_per_step
        self.decode_context_tokens += gained
        return self.recorder.step(
            self.now, duration, num_decoding, self.shown_running, self.shown_waiting, gained
        )

    def _update_from_output(self, scheduled: list[Request], in_span: bool) -> None:
        """vLLM's `update_from_output`: prefills that reached their last token emit it and start decoding;
        requests at max_tokens finish (`_free_request`) and their closed-loop client thinks and re-issues."""
        finished = self.decode_events.pop_finished(self.step_index - 1)
        completed: list[Request] = []
        for request in scheduled:
            request.num_computed_tokens += request.num_new_tokens
            if request.num_computed_tokens >= request.num_prompt_tokens + request.num_output_tokens:
                if in_span:
                    self.recorder.prefill_done(request, self.now)
                request.num_output_tokens += 1
                request.last_token_time = self.now
                completed.append(request)
        for request in completed:
            self.running.prefilling.remove(request)
            if request.num_output_tokens >= request.max_tokens:
                finished.append(request)
            else:
                self._start_decoding(request)
        for request in finished:
            self._free_request(request, in_span)
        self.shown_running = len(self.running.decoding) + len(self.running.prefilling)
        self.shown_waiting, self.shown_usage = len(self.waiting), self.kv_cache_manager.usage

    def _start_decoding(self, request: Request) -> None:
        """A request whose prompt is computed joins the lockstep decoders."""
        request.decode_from_step = self.step_index
        request.decode_from_computed = float(request.num_computed_tokens)
        request.decode_from_output = float(request.num_output_tokens)
        self.running.decoding.append(request)
        self.decode_context_tokens += request.num_computed_tokens - request.num_cached_tokens
        if request.num_cached_tokens:
            self.decoders_sharing += 1
            self.shared_prefix_tokens = max(self.shared_prefix_tokens, request.num_cached_tokens)
        self.decode_events.start(request)

    def _stop_reading(self, request: Request, num_computed_tokens: float) -> None:
        """A decoder leaves the batch: its context no longer read."""
        self.decode_context_tokens -= num_computed_tokens - request.num_cached_tokens
        if request.num_cached_tokens:
            self.decoders_sharing -= 1

    def _free_request(self, request: Request, in_span: bool) -> None:
        """vLLM's `_free_request`: leave `running`, give back every block."""
        decoding = self.running.decoding
        if request in decoding:
            decoding.remove(request)
            self._stop_reading(request, self.decode_events.computed_tokens(request, self.step_index))
            request.num_output_tokens = int(self.decode_events.output_tokens(request, self.step_index))
        self.kv_cache_manager.free(request)
        request.epoch += 1
        if in_span:
            self.recorder.finished(request, self.now)
        self.arrivals.reissue(request, self.now)
