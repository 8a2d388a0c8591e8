"""The step model held to the window's own mean ITL, through the simulation (an indirect-inference step).

The step fit prices its rows with features read from the history: the decoders beside each prefill step, and the
decoder-weighted batch of an interval, both read through a running gauge scraped once or twice per interval. The
simulation then realises those quantities its own way, by the arrival process and vLLM's scheduler. Where the two
readings differ, the simulated window's mean ITL departs from the measured one, which `_sum / _count` gives exactly;
on the cap-8 ramp's light step by 9 % (22.9 against 20.9 ms). That excess is a longer stay for every request, so
more of them running and a queue that forms too early under added load. The decode step's costs (per step, per
decoder, per context token) are therefore scaled so that the simulated window's mean ITL is the measured one;
a prefill's own costs, which the prefill times decide, are left as fitted.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvdoctor.whatif.model import Engine, SimResult, StepModel, Workload
from kvdoctor.whatif.readout import simulate
from kvdoctor.whatif.window import Snap, delta, hist_name

MIN_ITLS = 100  # measured ITLs the window needs before its mean outweighs the fit
MAX_SCALE = 1.3  # the most a window's mean moves the fit, either way; past it the fit is wrong otherwise
DEAD_BAND = 0.02  # closer than this, the simulation stands as fitted (a second run would buy nothing)


@dataclass(frozen=True)
class ItlCalibration:
    """The window's measured mean ITL, the fitted simulation's, and the factor on the decode step's costs."""

    measured_s: float
    simulated_s: float
    scale: float

    @property
    def applies(self) -> bool:
        """Whether the factor is far enough from 1 to change the step model."""
        return abs(self.scale - 1.0) > DEAD_BAND

    def note(self) -> str:
        """The calibration in words, for the what-if's notes."""
        return (
            f"decode step costs ×{self.scale:.3g}: the fitted step model simulated the window's mean ITL at "
            f"{self.simulated_s * 1e3:.3g} ms where vLLM measured {self.measured_s * 1e3:.3g} ms (_sum/_count)"
        )


def simulated_mean_itl(res: SimResult) -> float:
    """The simulated run's mean ITL, each step once per decoding request as vLLM observes it (nan: none)."""
    count = sum(k for _, k in res.itl)
    return sum(d * k for d, k in res.itl) / count if count else math.nan


def itl_calibration(window: list[Snap], res: SimResult) -> ItlCalibration | None:
    """The factor that brings the simulated window's mean ITL to the measured one (None: too few ITLs to say)."""
    a, b = window[0], window[-1]
    name = hist_name(b, "itl")
    count = delta(a, b, f"{name}_count")
    simulated = simulated_mean_itl(res)
    if count < MIN_ITLS or not (math.isfinite(simulated) and simulated > 0):
        return None
    measured = delta(a, b, f"{name}_sum") / count
    if not (math.isfinite(measured) and measured > 0):
        return None
    return ItlCalibration(measured, simulated, min(MAX_SCALE, max(1.0 / MAX_SCALE, measured / simulated)))


def calibrated(
    engine: Engine,
    step: StepModel,
    workload: Workload,
    replicas: int,
    duration_s: float,
    seed: int,
    window: list[Snap],
    res: SimResult,
) -> tuple[StepModel, SimResult, ItlCalibration | None]:
    """The step model and the window's simulation, calibrated to its mean ITL where it departs, with the calibration
    applied (else as given, and None).

    Not where the load rose or fell through the window (`Workload.profile`): its mean ITL mixes the operating
    points the load passed through, each weighted by how the simulation reached it, and one factor fitted to the
    mix misprices them all (the field recording `busy`: its mean moved the decode costs ×0.82 while the simulation
    already ran 13.6 requests against the 18.8 measured)."""
    if workload.profile:
        return step, res, None
    cal = itl_calibration(window, res)
    if cal is None or not cal.applies:
        return step, res, None
    step = step.decode_scaled(cal.scale)
    return step, simulate(engine, step, workload, replicas, duration_s, seed), cal
