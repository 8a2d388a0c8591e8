"""The what-if tests' background workers end with their test.

A worker thread simulating in this process pauses the cyclic collector for the whole process (`acyclic`), as the
daemon's cycle thread does around a cycle. A test that left its advisor or headroom worker mid-simulation made a later
test in the same pytest worker find the collector paused (tests/daemon/test_memory.py, once the calibration made a
window's simulation twice as long). Each worker a test starts is closed when it ends: the request under way finishes,
nothing queued runs after it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kvdoctor.whatif.jobs import JobsThread

CLOSE_TIMEOUT_S = (
    120.0  # the longest simulation a test leaves under way (a kv-bound headroom search, on a busy CI)
)


@pytest.fixture(autouse=True)
def _workers_end_with_their_test(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    started: list[JobsThread] = []
    made = JobsThread.__init__

    def tracked(self: JobsThread, *args: object, **kwargs: object) -> None:
        made(self, *args, **kwargs)  # type: ignore[arg-type]
        started.append(self)

    monkeypatch.setattr(JobsThread, "__init__", tracked)
    yield
    for worker in started:
        worker.close(CLOSE_TIMEOUT_S)
