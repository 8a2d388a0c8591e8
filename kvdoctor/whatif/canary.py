"""The cheaper configuration worth a canary: the point prediction says it breaks, the step model's cheap end says not.

Plan picks by the point prediction, and from a light window that prices a busier server's step dear on the CPUs
we recorded (three checks out of three held one replica fewer than plan chose). Where the nearest cheaper candidate
holds every SLO under the posterior step model that prices a batch cheapest (of 9 draws: about its 10th
percentile), the saving is inside the prediction's uncertainty, and only a recording of it can say which.
"""

from __future__ import annotations

from collections.abc import Callable

from kvdoctor.whatif.candidates import Candidate, Changes

# a candidate's flags, replicas and load → what the cheap-end step model predicts for it (Planner.evaluate)
Evaluate = Callable[[Changes, int, float], Candidate]


def might_hold(chosen: Candidate, tried: list[Candidate], cheap: Evaluate, load: float) -> Candidate | None:
    """The nearest candidate with fewer replicas than the pick, as the cheap-end step model predicts it, when it
    holds every SLO there; None when nothing is cheaper or it breaks even there."""
    cheaper = [c for c in tried if c.replicas < chosen.replicas]
    if not cheaper:
        return None
    nearest = max(cheaper, key=Candidate.worst)
    there = cheap(nearest.changes, nearest.replicas, load)
    return there if there.meets else None
