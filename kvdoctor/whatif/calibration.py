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
from kvdoctor.whatif.readout import WARMUP_S, simulate
from kvdoctor.whatif.sim import Simulator, run_until
from kvdoctor.whatif.window import Snap, delta, hist_name

MIN_ITLS = 100  # measured ITLs the window needs before its mean outweighs the fit
MAX_SCALE = 1.3  # the most a window's mean moves the fit, either way; past it the fit is wrong otherwise
DEAD_BAND = 0.02  # closer than this, the simulation stands as fitted (a second run would buy nothing)
# the simulated traffic a mean ITL is read from before the run goes on (or restarts calibrated): PILOT_S, the
# window's length where longer, and on until PILOT_ITLS ITLs (a light load's few decoders share each step's time)
PILOT_S = 60.0
PILOT_ITLS = 20000


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
) -> tuple[StepModel, SimResult, ItlCalibration | None]:
    """The window simulated (`readout.simulate`) with the step model calibrated to its mean ITL where it departs.

    The run is looked at after its pilot (PILOT_S, the window's length where longer, PILOT_ITLS ITLs at the
    least): where the fit stands it runs on to the end, the same run as one call, and is looked at again; only a
    calibrated window pays a second run, and where the pilot said so, only its pilot's length more.
    Not where the load rose or fell through the window (`Workload.profile`): its mean ITL mixes the operating
    points the load passed through, each weighted by how the simulation reached it, and one factor fitted to the
    mix misprices them all (the field recording `busy`: its mean moved the decode costs ×0.82 while the simulation
    already ran 13.6 requests against the 18.8 measured). Nor where a data-parallel server's engines carried uneven
    shares: each engine is a run of its own."""
    if workload.profile or workload.split_unevenly(replicas):
        return step, simulate(engine, step, workload, replicas, duration_s, seed), None
    share = workload.scaled(1.0 / replicas) if replicas > 1 else workload
    sim = Simulator(engine, step, prefix_hit_ratio=share.prefix_hit_ratio)
    scheduler = sim.workload_scheduler(share, duration_s, WARMUP_S, seed)
    end = WARMUP_S + duration_s
    pilot = WARMUP_S + min(duration_s, max(PILOT_S, window[-1].t - window[0].t))
    run_until(scheduler, pilot)
    # a light load's pilot holds few requests: on until its mean rests on PILOT_ITLS ITLs (or the run's end)
    while pilot < end and sum(k for _, k in scheduler.recorder.result.itl) < PILOT_ITLS:
        pilot = min(end, pilot + PILOT_S)
        run_until(scheduler, pilot)
    cal = itl_calibration(window, scheduler.recorder.result)
    if cal is None or not cal.applies:
        run_until(scheduler, end)
        cal = itl_calibration(window, scheduler.recorder.result)  # the whole run's mean has the last word
        if cal is None or not cal.applies:
            return step, scheduler.recorder.result, cal
    step = step.decode_scaled(cal.scale)
    return step, simulate(engine, step, workload, replicas, duration_s, seed), cal
