"""Recordings replayed through one daemon-shaped pipeline, cycle by cycle (several targets at once)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

from kvdoctor.diagnosis.target import TargetFacts
from kvdoctor.pipeline import Cycle, Pipeline
from kvdoctor.query import recording_instance
from kvdoctor.replay import replay
from kvdoctor.rules.loader import default_rule_files, load_files

# --max-num-seqs the recordings were made with, told to kvdoctor as an operator would (labels.json has no flags).
MAX_NUM_SEQS = {"batch_cap": 4, "compute_bound": 128}


def replay_all(paths: Iterable[Path], interval_s: float = 15.0) -> Iterator[Cycle]:
    """Replay every recording as one target of a single pipeline, as one kvdoctor watching them all would."""
    p = Pipeline(load_files(default_rule_files()))
    paths = list(paths)
    for path in paths:
        stem = recording_instance(path).split("--")[-1]
        p.add_target(recording_instance(path), TargetFacts(max_num_seqs=MAX_NUM_SEQS.get(stem)))
    return replay(p, paths, interval_s)
