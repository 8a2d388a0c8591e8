"""The daemon's heap: long-lived objects frozen out of full collections, frozen garbage collected on a refreeze."""

from __future__ import annotations

import gc
import weakref

from kvdoctor.daemon.memory import REFREEZE_S, YOUNG_THRESHOLD, Heap, release_memory


class Node:
    """An object that can sit in a reference cycle."""

    def __init__(self) -> None:
        self.other: Node | None = None


def cycle_of_two() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_settle_freezes_what_lives_and_thaw_hands_it_back() -> None:
    now = [0.0]
    heap = Heap(clock=lambda: now[0])
    try:
        assert heap.settle(1000)
        frozen = gc.get_freeze_count()
        assert frozen > 0
        assert not heap.settle(1050), "a store grown by 5 % is not frozen again"
        assert heap.settle(1200), "a store grown by 20 % (targets added) is"
        heap.thaw()
        assert gc.get_freeze_count() == 0
    finally:
        heap.thaw()  # the threshold too: the tests after this one collect as the interpreter would


def test_young_collections_are_fewer_while_the_heap_is_kept_and_as_before_after() -> None:
    before = gc.get_threshold()
    heap = Heap()
    try:
        heap.settle(10)
        assert gc.get_threshold() == (max(before[0], YOUNG_THRESHOLD), *before[1:])
        heap.thaw()
        assert gc.get_threshold() == before
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_cycle_that_dies_frozen_is_collected_at_the_next_refreeze() -> None:
    now = [0.0]
    heap = Heap(clock=lambda: now[0])
    try:
        held = cycle_of_two()
        keep = held()
        heap.settle(10)
        del keep  # the cycle is garbage now, but frozen: a full collection does not see it
        gc.collect()
        assert held() is not None
        now[0] += REFREEZE_S / 2
        assert not heap.settle(10)
        now[0] += REFREEZE_S
        assert heap.settle(10)
        assert held() is None
    finally:
        heap.thaw()


def test_a_release_collects_frozen_garbage() -> None:
    heap = Heap()
    try:
        held = cycle_of_two()
        keep = held()
        heap.settle(10)
        del keep
        release_memory(heap)
        assert held() is None
        assert gc.get_freeze_count() == 0
        assert heap.settle(10), "the next cycle freezes again"
    finally:
        heap.thaw()


def _collections_while(heap: Heap, allocations: int) -> int:
    seen: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(count)
    try:
        with heap.building():
            kept = [[i] for i in range(allocations)]  # a fleet's first cycle: containers that all live on
            during = len(seen)
        del kept
    finally:
        gc.callbacks.remove(count)
    return during


def test_the_first_cycle_builds_the_fleet_without_collections_and_settle_collects_once() -> None:
    before = gc.get_threshold()
    heap = Heap()
    try:
        assert _collections_while(heap, 200_000) == 0, (
            "nothing frozen yet: no collection while the store grows"
        )
        assert gc.isenabled()
        held = cycle_of_two()
        heap.settle(10)  # the end of that cycle: one collection of everything, then frozen
        assert held() is None
        assert _collections_while(heap, 200_000) > 0, (
            "once frozen, cycles collect their young objects as before"
        )
        heap.thaw()  # a reload that removed targets: the next cycle builds again
        assert _collections_while(heap, 200_000) == 0
    finally:
        gc.unfreeze()
        gc.set_threshold(*before)


def test_a_cycle_that_raises_while_building_leaves_the_collector_on() -> None:
    heap = Heap()
    try:
        with heap.building():
            assert not gc.isenabled()
            raise RuntimeError("a failed cycle")
    except RuntimeError:
        pass
    assert gc.isenabled()
