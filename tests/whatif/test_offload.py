"""The daemon's simulations in a child process at the lowest priority: same answers, off the cycle's GIL, and a
child that dies is replaced."""

from __future__ import annotations

import os
import select
import threading
import time
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

import pytest

from kvdoctor.whatif.breaks import restarts
from kvdoctor.whatif.followup import follow_up
from kvdoctor.whatif.headroom import search
from kvdoctor.whatif.offload import Offload, OffloadClosed, OffloadTimeout
from kvdoctor.whatif.predict import predict
from kvdoctor.whatif.sources import recording_snaps
from kvdoctor.whatif.workload import WindowError
from tests.support.wait import until

PAIRS = Path(__file__).parents[1] / "fixtures/recordings/vllm-0.32-cpu-whatif"
BATCHCAP, RESTART = PAIRS / "batchcap_before.jsonl.gz", PAIRS / "batchcap_restart.jsonl.gz"


@pytest.fixture(scope="module")
def offload():
    off = Offload()
    yield off
    off.close()


def test_a_prediction_in_the_child_is_the_one_made_here(offload):
    snaps = recording_snaps(BATCHCAP)
    window = snaps[-24:]
    here = predict(snaps, window, {"max_num_seqs": 16})
    there = offload.run(predict, snaps, window, {"max_num_seqs": 16})
    assert there.to_dict() == here.to_dict()
    assert offload.run(search, snaps, window, None, {"ttft_p95": 2.0}) == search(
        snaps, window, None, {"ttft_p95": 2.0}
    )


def test_the_child_runs_at_the_lowest_priority_and_its_errors_come_back(offload):
    assert offload.run(os.nice, 0) == 19  # os.nice(0) says the niceness it runs at
    assert offload.run(os.getpid) != os.getpid()
    with pytest.raises(WindowError, match="at least 5"):
        offload.run(predict, [], [], {"max_num_seqs": 16})


def test_a_child_that_dies_is_replaced_on_the_next_call():
    off = Offload()
    try:
        first = off.run(os.getpid)
        with pytest.raises(BrokenProcessPool):
            off.run(os._exit, 3)  # dies, and the one started in its place dies too
        assert off.run(os.getpid) not in (first, os.getpid())
    finally:
        off.close()


def test_a_call_that_the_final_close_interrupts_ends_and_no_child_is_started_again():
    # at exit close() breaks the call in progress; a retry that started a new child would keep the exit waiting
    off = Offload()
    ended: list[BaseException] = []

    def call() -> None:
        try:
            off.run(select.select, [], [], [], 60.0)  # blocks in the child until close() ends it
        except BaseException as exc:  # the test reads what the worker would see
            ended.append(exc)

    worker = threading.Thread(target=call, daemon=True)
    worker.start()
    until(off.pids, what="the child started")
    off.close(final=True)
    until(lambda: not worker.is_alive(), what="the interrupted call returned")
    assert len(ended) == 1 and isinstance(ended[0], OffloadClosed), ended
    assert off.pids() == []
    with pytest.raises(OffloadClosed):
        off.run(os.getpid)


def test_a_child_stopped_by_close_is_replaced_on_the_next_call():
    # close() without final stops the child (a test that wants another niceness, say); the offload goes on
    off = Offload()
    try:
        first = off.run(os.getpid)
        off.close()
        assert off.pids() == []
        assert off.run(os.getpid) not in (first, os.getpid())
    finally:
        off.close(final=True)


@pytest.mark.slow  # two predictions of the restart recording (minutes on a busy 2-core machine)
def test_a_follow_up_in_the_child_is_the_one_made_here(offload):
    # the advisor's follow-up predicts the change from before the restart: it runs in the child like the rest
    snaps = recording_snaps(RESTART)
    restart_t = snaps[restarts(snaps)[-1]].t
    here = follow_up("batchcap_restart", snaps, restart_t)
    assert here is not None and here.change == {"max_num_seqs": 12}
    there = offload.run(follow_up, "batchcap_restart", snaps, restart_t)
    assert there == here


def test_a_call_past_its_deadline_is_stopped_and_the_next_call_gets_a_new_child():
    # a simulation that never ends (a target's impossible numbers) must not hold the child every target shares
    off = Offload(call_timeout_s=0.5)
    try:
        first = off.run(os.getpid)
        with pytest.raises(OffloadTimeout, match=r"sleep ran past 0.5 s in the simulation child"):
            off.run(time.sleep, 600)
        until(lambda: not _alive(first), timeout=10.0, what="the stuck child to be stopped")
        assert off.run(os.getpid) not in (first, os.getpid())
    finally:
        off.close()


def test_a_calls_deadline_counts_its_own_run_not_its_wait_behind_another_threads():
    # the advisor's and the headroom worker's calls share the child: each runs 1.2 s, under the 2 s deadline, but
    # the second waits 1.2 s for the first; were that wait counted, it would pass 2 s and stop the child under it
    off = Offload(call_timeout_s=2.0)
    try:
        child = off.run(os.getpid)  # started: the spawn is not what is timed
        errors: list[BaseException] = []

        def call() -> None:
            try:
                off.run(time.sleep, 1.2)
            except BaseException as exc:  # whatever the call raised is the failure
                errors.append(exc)

        threads = [threading.Thread(target=call) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        assert errors == []
        assert off.run(os.getpid) == child  # the child was never stopped
    finally:
        off.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a child stopped but not yet reaped by the pool's manager thread is a zombie: gone for our purpose
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(") ")[-1][:1] != "Z"
