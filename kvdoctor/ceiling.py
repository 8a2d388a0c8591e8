"""The pack's compute test (rules/kvdoctor.yml, kvdoctor:itl_ratio:compute_threshold), for the advice's text and the
what-if's verdict: with a linear step curve through the light-load point, tokens/s at batch b over the server's
ceiling is u = b (r - 1) / ((b - 1) r), r = ITL / light-load ITL; compute from u = CEILING_SHARE.
"""

from __future__ import annotations

CEILING_SHARE = 0.7  # more batch buys < 43 % more tokens/s (0.8 missed vLLM 0.8.5's compute-bound window)
COMPUTE_FLOOR, FLOOR_SLOPE = 2.5, 0.004  # never below 2.5× the light load plus 0.4 % per running request
# before a light-load baseline is learned, the pack names compute on a real batch (≥ 4 running) with tokens this slow
COLD_START_ITL_S, COLD_START_RUNNING = 0.05, 4.0


def compute_threshold_ratio(running: float) -> float:
    """The ITL / light-load ratio from which the pack names compute at this batch."""
    b = max(running, 0.0)
    return max(b / ((1 - CEILING_SHARE) * b + CEILING_SHARE), COMPUTE_FLOOR * (1 + FLOOR_SLOPE * b))


def ceiling_share(running: float, itl_s: float, light_itl_s: float) -> float | None:
    """Tokens/s over this server's ceiling (0-1) at this batch, as the pack records it; None below 1.5 running."""
    if running <= 1.5 or itl_s <= 0 or light_itl_s <= 0:
        return None
    return min(max(running * (itl_s - light_itl_s) / ((running - 1) * itl_s), 0.0), 1.0)
