"""The what-if workers stop when the daemon does: their threads end, what was queued is dropped, nothing new runs."""

from __future__ import annotations

import threading
from collections import deque

import pytest

from kvdoctor.config import Config, TargetSpec
from kvdoctor.rules.loader import default_rule_files, load_files
from kvdoctor.verdicts import Diagnosis
from kvdoctor.whatif.advisor import Advisor
from kvdoctor.whatif.effectcache import Key
from kvdoctor.whatif.headroom import HeadroomWorker
from kvdoctor.whatif.jobs import Jobs, JobsThread
from tests.support.daemon import Daemons
from tests.support.wait import until


def test_a_closed_advisor_finishes_its_prediction_drops_the_queue_and_takes_no_more() -> None:
    adv = Advisor(background=True)
    adv._history["t"] = deque()
    closing, done = threading.Event(), []
    close_jobs = adv._jobs.close

    def close_then_tell() -> None:
        close_jobs()
        closing.set()

    adv._jobs.close = close_then_tell  # type: ignore[method-assign]

    def compute(key: object, t: float, history: object = None, simulate: bool = True) -> None:
        closing.wait(10)  # the prediction under way when the daemon stops
        done.append(key)

    adv._compute = compute  # type: ignore[method-assign]
    first, queued, late = (Key("t", (("max_num_seqs", float(n)),)) for n in (8, 16, 32))
    adv._submit(first, 0.0)
    until(lambda: adv.stats()["queued"] == 0, timeout=10.0, what="the worker to take the first request")
    adv._submit(queued, 1.0)
    worker = adv.worker.thread
    assert worker is not None and worker.is_alive()
    adv.close(timeout=10.0)
    assert not worker.is_alive()
    adv._submit(late, 2.0)
    assert done == [first] and adv.stats()["queued"] == 0
    assert adv.worker.thread is worker  # no new thread started for the late request


def test_a_closed_headroom_worker_ends_its_thread_and_takes_no_more() -> None:
    asked: list[str] = []

    def history(target: str) -> list:
        asked.append(target)
        return []

    worker = HeadroomWorker(history, background=True)
    wants = {n: ({"ttft_p95": 2.0}, None) for n in ("a", "b")}
    worker.annotate([Diagnosis("a", "m", 0.0, "healthy", 0.0)], 0.0, wants)
    until(lambda: asked, timeout=10.0, step=0.01, what="the worker to compute the first request")
    thread = worker.worker.thread
    assert thread is not None
    worker.close(timeout=10.0)
    assert not thread.is_alive()
    worker.annotate([Diagnosis("b", "m", 100.0, "healthy", 0.0)], 100.0, wants)
    assert asked == ["a"] and worker.stats()["queued"] == 0


def test_the_daemon_s_shutdown_stops_its_what_if_workers(daemons: Daemons) -> None:
    d = daemons(
        Config(targets=[TargetSpec("t", "http://127.0.0.1:9/metrics")]), load_files(default_rule_files())
    )
    adv, headroom = d.pipeline.advisor, d.pipeline.headroom
    assert adv is not None and headroom is not None
    adv._history["t"] = deque()
    done: list[object] = []
    adv._compute = lambda key, t, history=None, simulate=True: done.append(key)  # type: ignore[method-assign]
    adv._submit(Key("t", (("max_num_seqs", 16.0),)), 0.0)
    headroom.annotate([Diagnosis("t", "m", 0.0, "healthy", 0.0)], 0.0, {"t": ({"ttft_p95": 2.0}, None)})
    until(lambda: done, timeout=10.0, what="the advisor's worker to run")
    threads = [adv.worker.thread, headroom.worker.thread]
    assert all(t is not None and t.is_alive() for t in threads)
    d.shutdown()
    assert not any(t is not None and t.is_alive() for t in threads)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death is the point
def test_a_worker_whose_thread_died_starts_another_and_an_unthreaded_one_only_queues() -> None:
    served: list[str] = []
    jobs: Jobs[str] = Jobs()

    def work_once() -> bool:
        job = jobs.get()
        if job is None:
            return False
        jobs.done(job[0])
        if job[0] == "boom":
            raise RuntimeError("a request that kills its thread")
        served.append(job[0])
        return True

    worker = JobsThread(jobs, work_once, "test-worker")
    worker.submit("boom", 0.0)
    first = worker.thread
    assert first is not None
    first.join(10.0)
    assert not first.is_alive()
    worker.submit("a", 1.0)  # the next request finds no thread alive: a new one serves it
    until(lambda: served == ["a"], timeout=10.0, what="the replacement thread to serve the request")
    assert worker.thread is not first
    worker.close(timeout=10.0)
    quiet: Jobs[str] = Jobs()
    stepped = JobsThread(quiet, lambda: False, "test-stepped")
    stepped.threaded = False
    assert stepped.submit("b", 2.0) and stepped.thread is None and len(quiet) == 1
