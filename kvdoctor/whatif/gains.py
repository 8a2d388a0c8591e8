"""What a relief gains, and whether that helps: the throughput it buys, weighed against what it costs every stream.

While the server is saturated (an open loop past capacity, or clients that wait for answers) help is capacity: its
throughput is what it can give, and a relief that buys none only moves the wait from TTFT into ITL (or back); past
capacity the queue grows either way unless the relief ends the overload, and in a closed loop the same throughput means
the same mean request latency (Little's law). Capacity bought with a bigger batch is weighed against what it costs
every stream: decoding serves tokens/s = running / ITL and a step costs a fixed part plus a part per running request,
so a batch grown g_B times slows each token by 1 + u (g_B − 1), u the share of its compute ceiling the server runs at.
The relief's prediction (tokens/s ×g_X, ITL ×g_ITL, so g_B = g_X g_ITL) says u = (g_ITL − 1) / (g_X g_ITL − 1); from
the pack's compute line (`ceiling.CEILING_SHARE`: more batch buys < 43 % more tokens/s) the added requests become
slower tokens, not capacity, and compute limits, whatever small gain the simulation shows. Below capacity every
arrival is served whatever the change, so there a relief helps when it cuts the quantity that suffers without
lengthening the other latency.
"""

from __future__ import annotations

from typing import NamedTuple

from kvdoctor.ceiling import CEILING_SHARE
from kvdoctor.verdicts import Effect

NOISE = 0.05  # throughput within 5 % either way is the same capacity (the simulation's noise), not a gain
BUYS = 1.10  # below capacity a relief helps when it cuts the suffering latency by at least 10 %…
WORSE = 1.10  # …and lengthens the other by less than 10 %
OTHER = {"ttft_p95_s": "itl_p50_s", "itl_p50_s": "ttft_p95_s"}


class Gain(NamedTuple):
    """What one relief buys as factors, above 1 better (1.0 where a side is not predicted); throughput is generation
    tokens/s after over now (completed requests/s where tokens/s is not predicted)."""

    throughput: float
    latency: float  # the suffering quantity, now over after
    other: float  # the other latency, now over after (below 1: it lengthened)
    slower: float  # ITL p50 after over now (above 1: every stream's tokens come slower)


def gain(effect: Effect, quantity: str) -> Gain:
    """What the effect buys: throughput, the suffering quantity and the other latency as factors."""
    tps = _ratio(effect.after, effect.now, "generation_tokens_per_s")
    if tps is None:
        tps = _ratio(effect.after, effect.now, "requests_per_s")
    return Gain(
        tps or 1.0,
        _ratio(effect.now, effect.after, quantity) or 1.0,
        _ratio(effect.now, effect.after, OTHER.get(quantity, "")) or 1.0,
        _ratio(effect.after, effect.now, "itl_p50_s") or 1.0,
    )


def ceiling_share(g: Gain) -> float:
    """The share of its compute ceiling the server runs at, as the relief's prediction implies (0 when tokens do not
    slow): with a linear step curve a batch grown g_B = g_X g_ITL times slows each token by 1 + u (g_B − 1)."""
    grown = g.throughput * g.slower
    if g.slower <= 1 or grown <= 1:
        return 0.0
    return min((g.slower - 1) / (grown - 1), 1.0)


def helps(effect: Effect, quantity: str) -> bool:
    """The relief raises capacity short of the compute ceiling, or (below capacity) cuts the suffering latency alone."""
    g = gain(effect, quantity)
    if g.throughput >= 1 + NOISE or ends_overload(effect):
        # at a saturated server, capacity bought at the compute ceiling is a queue moved into slower tokens
        return not effect.saturated or ceiling_share(g) < CEILING_SHARE
    if effect.saturated or g.throughput <= 1 - NOISE:
        return False  # the same throughput past capacity: a latency moved is a latency traded
    return g.latency >= BUYS and g.other > 1 / WORSE


def ends_overload(effect: Effect) -> bool:
    """An open loop past capacity now is served after: the queue stops growing (its TTFT has a steady value again)."""
    return effect.overloaded_now and effect.after.get("ttft_p95_s") is not None


def score(effect: Effect, quantity: str) -> float:
    """How much a relief that helps buys: throughput while saturated, else the suffering quantity's cut."""
    g = gain(effect, quantity)
    return g.throughput if effect.saturated else g.latency


def _ratio(top: dict[str, float | None], bottom: dict[str, float | None], key: str) -> float | None:
    a, b = top.get(key), bottom.get(key)
    return a / b if a is not None and b is not None and a > 0 and b > 0 else None
