"""The advisor's predictions, each computed once per run, for test modules whose subject is not the prediction.

`kvdoctor replay`, `report` and `check` attach predicted effects to the advice: the advisor simulates every change
it advises, which is ~90 % of such a command's CPU. Modules that run these commands many times over the same
recordings (the notify end-to-end flows, the report's sums) ask the advisor the same questions each time. The
`shared_predictions` fixture (tests/conftest.py) makes the advisor's `predict` compute each distinct call once,
through `replays.stored`: in this process, and on disk for the run's other workers and later runs.

Nothing is assumed equal that is not: the key is the pickled arguments themselves (two calls share a prediction only
when their histories, windows and changes pickle to the same bytes), with the kvdoctor package's files, the
libraries and this module (`replays.environment()`). `predict` is deterministic (seeded), so a shared answer is the
one a fresh call makes. A call that raises is not kept: it raises again, computed afresh, on every call. Modules
that test the prediction itself (tests/whatif) do not use the fixture.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import Any

from kvdoctor.whatif.predict import Prediction, predict
from tests.support import replays

FORMAT = "kvdoctor-predict-1"
_here: dict[str, bytes] = {}  # this process's answers (tens of KB each), before the disk


class SharedPredict:
    """`predict` with each distinct call computed once (see the module's docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Prediction:
        """predict(*args, **kwargs), or the stored answer to the same call."""
        h = hashlib.sha256(f"{FORMAT}\0{replays.environment()}\0".encode())
        h.update(Path(__file__).read_bytes())
        h.update(pickle.dumps((args, sorted(kwargs.items())), protocol=pickle.HIGHEST_PROTOCOL))
        key = f"predict-{h.hexdigest()}"
        answer = _here.get(key)
        if answer is None:
            answer = _here[key] = replays.stored(key, lambda: _answer(*args, **kwargs))
        return pickle.loads(answer)  # type: ignore[no-any-return]  # a fresh copy per caller: never shared

    def __reduce__(self) -> tuple[Any, tuple[bytes]]:
        # a daemon's simulation child (whatif/offload) is handed the real function
        return pickle.loads, (pickle.dumps(predict),)


def _answer(*args: Any, **kwargs: Any) -> bytes:
    return pickle.dumps(predict(*args, **kwargs), protocol=pickle.HIGHEST_PROTOCOL)
