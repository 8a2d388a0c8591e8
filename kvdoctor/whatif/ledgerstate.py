"""The step ledger in the daemon's state file: checked whole, so a wrong ledger part is dropped, never half-read."""

from __future__ import annotations

import math

from kvdoctor.jsondoc import JsonValue
from kvdoctor.whatif.ledger import _SEEN, _SLOT, _SUM_W, HORIZON_S, MAX_BINS, MEMORY_LABELS, Ledger

FUTURE_S = 3600.0  # a bin seen later than this after the clock's now is a wrong clock or a wrong file


def restored(doc: JsonValue, now: float) -> dict[str, Ledger] | str:
    """Every target's ledger from to_state()'s JSON (bins older than a day dropped), or what is wrong with it."""
    entries = doc.get("targets") if isinstance(doc, dict) else None
    if not isinstance(entries, list):
        return "step_ledger.targets is not a list"
    out: dict[str, Ledger] = {}
    for i, e in enumerate(entries):
        where = f"step_ledger.targets[{i}]"
        target = e.get("target") if isinstance(e, dict) else None
        if not isinstance(target, str) or not target or target in out:
            return f"{where} lacks a target name of its own"
        engine = _engine(e.get("engine"))
        if engine is None:
            return f"{where}.engine is not an engine key ([name, value] strings, kv_bytes_per_token last)"
        bins, led = e.get("bins"), Ledger(engine)
        if not isinstance(bins, list) or len(bins) > MAX_BINS:
            return f"{where}.bins is not a list of at most {MAX_BINS} bins"
        for j, b in enumerate(bins):
            why = _bin_problem(b, now)
            if why is None and b[0] in led.slots:
                why = "repeats a bin"
            if why is not None:
                return f"{where}.bins[{j}] {why}"
            if b[1 + _SEEN] >= now - HORIZON_S:
                led.slots[b[0]] = len(led.sums) // _SLOT
                led.sums.extend(float(v) for v in b[1:])
        if led.slots:
            out[target] = led
    return out


def _engine(e: JsonValue) -> tuple[tuple[str, str], ...] | None:
    if (
        not isinstance(e, list)
        or not e
        or not all(isinstance(p, list) and len(p) == 2 and all(isinstance(v, str) for v in p) for p in e)
    ):
        return None
    names = [p[0] for p in e[:-1]]
    if e[-1][0] != "kv_bytes_per_token" or names != sorted(set(names)) or MEMORY_LABELS.intersection(names):
        return None
    return tuple((k, v) for k, v in e)


def _bin_problem(b: JsonValue, now: float) -> str | None:
    if not isinstance(b, list) or len(b) != 1 + _SLOT:
        return f"is not a list of a key and {_SLOT} numbers"
    if not isinstance(b[0], int) or isinstance(b[0], bool) or not 0 <= b[0] < 2**32:
        return "has no bin key (an integer)"
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in b[1:]):
        return "holds a value that is not a number"
    if not all(isinstance(v, float) or abs(v) < 2**64 for v in b[1:]):  # float() of a longer int overflows
        return "holds an integer too large"
    if not all(math.isfinite(v) and v >= 0 for v in b[1:]):
        return "holds a NaN, infinite or negative sum"
    w, seen = b[1 + _SUM_W], b[1 + _SEEN]
    if not w > 0 or not all(math.isfinite(v / w) for v in b[1 : 1 + _SUM_W]):
        return "has no weight"
    if not 0 < seen <= now + FUTURE_S:
        return f"was last seen at an impossible time ({seen!r}, now {now:.0f})"
    return None
