"""vLLM's `Scheduler.running` list, as the simulated scheduler keeps it."""

from __future__ import annotations

from kvdoctor.whatif.model import Request


class Running:
    """vLLM's `running` list in admission order, kept as decoding requests then prefilling ones.

    A request prefills right after admission and decodes once its prompt is computed, so the prefilling ones
    are always the youngest: `youngest()` is the request vLLM's `self.running.pop()` would preempt.
    """

    __slots__ = ("decoding", "prefilling")

    def __init__(self) -> None:
        self.decoding: list[Request] = []
        self.prefilling: list[Request] = []

    def __len__(self) -> int:
        return len(self.decoding) + len(self.prefilling)

    def youngest(self) -> Request:
        """The last admitted running request."""
        return self.prefilling[-1] if self.prefilling else self.decoding[-1]
