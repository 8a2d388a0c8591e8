"""The lockstep-decode event queue: when a decoding request next needs the scheduler's attention.

Every decoding request gains `accepted_per_step` tokens a step, so its position at any step follows from where
it started decoding. The scheduler then touches a decoder only at two events: the step it crosses into a block
it does not hold (vLLM's `allocate_slots` would allocate, or preempt), and the step that produces its last
token. Events carry the request's epoch; a preemption or finish bumps it, so stale events are skipped.
"""

from __future__ import annotations

import math
from operator import itemgetter

from kvdoctor.whatif.model import Request

_BY_ADMISSION = itemgetter(0)
_EPS = 1e-9  # float slack so that an exact whole number of steps does not round to the next one


class DecodeEvents:
    """Block-boundary and finish events of lockstep decoders, keyed by step number."""

    __slots__ = ("accepted_per_step", "block_due", "block_size", "finish_due", "num_lookahead_tokens")

    def __init__(self, block_size: int, accepted_per_step: float, num_lookahead_tokens: int) -> None:
        self.block_size, self.accepted_per_step = block_size, accepted_per_step
        self.num_lookahead_tokens = num_lookahead_tokens
        self.block_due: dict[int, list[tuple[int, Request, int]]] = {}
        self.finish_due: dict[int, list[tuple[Request, int]]] = {}

    def computed_tokens(self, request: Request, step: int) -> float:
        """A decoder's `num_computed_tokens` at the start of step."""
        return request.decode_from_computed + (step - request.decode_from_step) * self.accepted_per_step

    def output_tokens(self, request: Request, step: int) -> float:
        """A decoder's `num_output_tokens` at the start of step."""
        return request.decode_from_output + (step - request.decode_from_step) * self.accepted_per_step

    def start(self, request: Request) -> None:
        """At a request's first decode step: schedule its last step, and its next block if sooner."""
        remaining = request.max_tokens - request.decode_from_output
        last = request.decode_from_step + math.ceil(remaining / self.accepted_per_step - _EPS) - 1
        self.finish_due.setdefault(last, []).append((request, request.epoch))
        self.arm_block(request, request.decode_from_step, last)

    def arm_block(self, request: Request, not_before: int, last: int | None = None) -> None:
        """Schedule the request's next block event: the first step whose new token (plus lookahead slots)
        falls outside the blocks it holds, no earlier than not_before; none if that is after its last step."""
        slots = (request.num_blocks + request.num_cached_tokens // self.block_size) * self.block_size
        room = slots - 1 - self.num_lookahead_tokens - request.decode_from_computed
        step = request.decode_from_step + max(0, math.floor(room / self.accepted_per_step + _EPS) + 1)
        if step < not_before:
            step = not_before
        if last is None or step <= last:
            self.block_due.setdefault(step, []).append((request.admit_order, request, request.epoch))

    def pop_block_due(self, step: int) -> list[tuple[int, Request, int]]:
        """(admission order, decoder, epoch) of the decoders needing a block in step, oldest admission first
        (vLLM walks `running` in order). The caller skips those whose epoch moved on: preempted since."""
        due = self.block_due.pop(step, None)
        if not due:
            return []
        due.sort(key=_BY_ADMISSION)
        return due

    def pop_finished(self, step: int) -> list[Request]:
        """Decoders whose last token step produced."""
        return [request for request, epoch in self.finish_due.pop(step, ()) if request.epoch == epoch]
