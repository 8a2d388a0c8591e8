"""A step ledger: what a target's step times cost over the last day, binned, so a light window still knows big batches.

The advisor keeps 15 minutes of snapshots; once a busy hour has left them, a light window's step fit would have to
extrapolate the cost of a big batch from batches 1-3. The ledger keeps the step fit's regression rows
(`history_rows`) of the snapshots that left the buffer, folded into bins by decoding batch, context per decoder and
prefill tokens per step: each bin keeps weighted sums, so it is one weighted mean row, and a target's memory is
O(bins), not O(time). A restart with another engine (cache_config_info beyond its memory size: block size, KV
dtype, bytes per token) starts a new ledger; one with only a new `--max-num-seqs` keeps it, since a step's cost at
a batch does not depend on the cap. `merged` adds to a window's own rows the bins it does not show.
"""

from __future__ import annotations

import math
import threading
from array import array
from collections import deque
from dataclasses import dataclass

from kvdoctor.jsondoc import JsonValue
from kvdoctor.whatif.steprows import Row, history_rows
from kvdoctor.whatif.window import Snap
from kvdoctor.whatif.workload import DEFAULT_MAX_NUM_BATCHED_TOKENS

HORIZON_S = 24 * 3600.0  # a bin not seen for this long is forgotten
MAX_BINS = 96  # per target; the least recently seen bin goes first
CHUNK_S = 60.0  # evicted snapshots are read into rows a minute at a time
# cache_config_info labels that change with the memory given to the cache, not with what a step costs
MEMORY_LABELS = frozenset(
    {
        "engine",
        "gpu_memory_utilization",
        "num_gpu_blocks",
        "num_gpu_blocks_override",
        "num_cpu_blocks",
        "kv_cache_memory_bytes",
        "kv_cache_size_tokens",
        "kv_cache_max_concurrency",
    }
)
_SUM_X, _SUM_Y, _SUM_W, _SEEN, _SLOT = 0, 5, 6, 7, 8  # a bin's slot: Σw·x (5), Σw·y, Σw, last seen
_EMPTY = array("d", [0.0] * _SLOT)


@dataclass(frozen=True)
class Recall:
    """A target's ledger rows and what they span, for one step fit (hashable: it keys the learned windows)."""

    keys: tuple[int, ...]  # each row's bin
    rows: tuple[tuple[tuple[float, ...], float, float], ...]  # its weighted mean row: features, y, Σ weight
    since: float  # when the least recently seen bin was last seen

    def note(self, used: list[Row], now: float) -> str:
        """The ledger's contribution in words: the batches it added and how far back."""
        batches = sorted({max(1, round(x[1])) for x, _, _ in used if x[1] >= 0.5}) or [0]
        span = f"{batches[0]}" if batches[0] == batches[-1] else f"{batches[0]}-{batches[-1]}"
        hours = max(0.0, now - self.since) / 3600
        ago = f"{hours:.1f} h" if hours >= 1 else f"{hours * 60:.0f} min"
        return (
            f"step ledger: decoding batches {span} from the last {ago} of this target's history "
            f"({len(used)} bins the recent window does not show)"
        )


def bin_key(x: list[float] | tuple[float, ...]) -> int:
    """A row's bin: decoding batch (exact to 8, then ~25 % wide), context per decoder and prefill tokens (×2)."""
    d = x[1]
    batch = round(d) if d < 8.5 else 8 + round(math.log(d / 8) / math.log(1.25))
    ctx = round(math.log2(1.0 + x[3] / d)) if d > 0 else -1
    # one int, not a tuple: a target keeps up to MAX_BINS of them
    return (batch * 64 + ctx + 1) * 64 + round(math.log2(1.0 + x[2]))


def engine_key(info: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """What identifies an engine's step costs in cache_config_info: all but its memory size, plus bytes per token."""
    try:
        per_token = f"{float(info['kv_cache_memory_bytes']) / float(info['kv_cache_size_tokens']):.6g}"
    except (KeyError, ValueError, ZeroDivisionError):
        per_token = ""
    kept = tuple(sorted((k, v) for k, v in info.items() if k not in MEMORY_LABELS))
    return (*kept, ("kv_bytes_per_token", per_token))


@dataclass(frozen=True)
class Held:
    """What a target's ledger holds: its bins and when its least recently seen bin was last seen."""

    bins: int
    oldest_seen: float


class Ledger:
    """One target's binned rows and the snapshots still to be read into them."""

    def __init__(self, engine: tuple[tuple[str, str], ...]) -> None:
        self.engine = engine
        self.info: dict[str, str] = {}  # the last cache_config_info seen, whose key is `engine`
        self.slots: dict[int, int] = {}  # bin → its slot in `sums`
        # per slot: Σw·x (5), Σw·y, Σw, last seen; one array for all bins (a few KB a target, not an object each)
        self.sums: array[float] = array("d")
        self.pending: list[Snap] = []

    def add(self, snap: Snap) -> None:
        """One snapshot that left the buffer; a minute of them is read into rows."""
        gen = "vllm:generation_tokens_total"
        if self.pending and snap.get(gen, 0.0) < self.pending[-1].get(gen, 0.0):  # a restart: a chunk ends
            self.fold(self.pending, self.pending[-1].t)
            self.pending = []
        self.pending.append(snap)
        if snap.t - self.pending[0].t >= CHUNK_S:
            self.fold(self.pending, snap.t)
            self.pending = [snap]  # the next chunk's intervals start where this one's ended

    def fold(self, snaps: list[Snap], t: float) -> None:
        """Fold the rows of consecutive snapshots into the bins; drop what is too old or too many."""
        sums = self.sums
        for x, y, w in history_rows(snaps, DEFAULT_MAX_NUM_BATCHED_TOKENS) if len(snaps) > 1 else ():
            if not (w > 0 and math.isfinite(y)):
                continue
            k = bin_key(x)
            i = self.slots.get(k)
            if i is None:
                i = self.slots[k] = len(sums) // _SLOT
                sums.extend(_EMPTY)
            o = i * _SLOT
            for j in range(5):
                sums[o + _SUM_X + j] += w * x[j]
            sums[o + _SUM_Y] += w * y
            sums[o + _SUM_W] += w
            sums[o + _SEEN] = max(sums[o + _SEEN], t)
        by_age = sorted(self.slots, key=lambda k: sums[self.slots[k] * _SLOT + _SEEN], reverse=True)
        kept = [k for k in by_age[:MAX_BINS] if sums[self.slots[k] * _SLOT + _SEEN] >= t - HORIZON_S]
        if len(kept) < len(self.slots):
            slots, self.sums = {}, array("d")
            for k in kept:
                o = self.slots[k] * _SLOT
                slots[k] = len(self.sums) // _SLOT
                self.sums.extend(sums[o : o + _SLOT])
            self.slots = slots

    def to_state(self, target: str, now: float) -> JsonValue:
        """Its engine and the bins seen within a day as JSON (a bin: its key, then its slot's sums and last seen);
        pending snapshots are not kept (less than a minute of them)."""
        s, o = self.sums, now - HORIZON_S
        bins = [
            [k, *s[i * _SLOT : (i + 1) * _SLOT]] for k, i in self.slots.items() if s[i * _SLOT + _SEEN] >= o
        ]
        return {"target": target, "engine": [list(p) for p in self.engine], "bins": bins}

    def recall(self) -> Recall | None:
        """The bins as weighted mean rows (None: empty)."""
        if not self.slots:
            return None
        keys = tuple(sorted(self.slots))
        s, rows = self.sums, []
        for k in keys:
            o = self.slots[k] * _SLOT
            w = s[o + _SUM_W]
            rows.append((tuple(s[o + _SUM_X + j] / w for j in range(5)), s[o + _SUM_Y] / w, w))
        since = min(s[i * _SLOT + _SEEN] for i in self.slots.values())
        return Recall(keys, tuple(rows), since)


class Ledgers:
    """Every target's ledger (thread-safe): fed by the advisor as snapshots leave its history buffer."""

    def __init__(self) -> None:
        self._by_target: dict[str, Ledger] = {}
        self._lock = threading.Lock()

    def evict(self, target: str, history: deque[Snap], before: float) -> None:
        """Pop the snapshots older than `before` off a target's history, into its ledger."""
        while history and history[0].t < before:
            self.add(target, history.popleft())

    def add(self, target: str, snap: Snap) -> None:
        """One snapshot of a target, oldest first; another engine starts a new ledger."""
        with self._lock:
            led = self._by_target.get(target)
            # the advisor gives a target's scrapes one info dict while it does not change: its key is read once;
            # a scrape without cache_config_info says nothing of its engine, so it does not end the ledger
            if led is None or (
                snap.info and snap.info is not led.info and led.engine != engine_key(snap.info)
            ):
                led = self._by_target[target] = Ledger(engine_key(snap.info))
            if snap.info:
                led.info = snap.info
            led.add(snap)

    def recall(self, target: str) -> Recall | None:
        """A target's ledger rows for a step fit (None: nothing yet)."""
        with self._lock:
            led = self._by_target.get(target)
            return None if led is None else led.recall()

    def held(self) -> dict[str, Held]:
        """Per target: its bins and when the least recently seen was last seen (for kvdoctor's own /metrics)."""
        with self._lock:
            return {
                t: Held(len(led.slots), min(led.sums[i * _SLOT + _SEEN] for i in led.slots.values()))
                for t, led in self._by_target.items()
                if led.slots
            }

    def to_state(self, now: float) -> JsonValue:
        """Every target's bins as JSON, for the daemon's state file."""
        with self._lock:
            states = [led.to_state(t, now) for t, led in self._by_target.items()]
        return {"targets": [s for s in states if s["bins"]]}

    def adopt(self, ledgers: dict[str, Ledger]) -> None:
        """Take ledgers restored from a state file (`ledgerstate.restored`)."""
        with self._lock:
            self._by_target.update(ledgers)

    def forget(self, target: str) -> None:
        """Drop a removed target's ledger."""
        with self._lock:
            self._by_target.pop(target, None)


def merged(rows: list[Row], recall: Recall | None, now: float) -> tuple[list[Row], str]:
    """A window's rows and the ledger's rows of bins they do not show, each weighing at most the window's heaviest
    bin (the window's own rows win where both have a bin: recent data over old); and the note saying so."""
    if recall is None or not rows:
        return rows, ""
    own: dict[int, float] = {}
    for x, _, w in rows:
        k = bin_key(x)
        own[k] = own.get(k, 0.0) + w
    cap = max(own.values())
    # a day of a bin is not a day's worth of certainty: the engine may have drifted, so it counts as a busy bin
    used: list[Row] = [
        (list(x), y, min(w, cap))
        for k, (x, y, w) in zip(recall.keys, recall.rows, strict=True)
        if k not in own
    ]
    if not used:
        return rows, ""
    return rows + used, recall.note(used, now)
