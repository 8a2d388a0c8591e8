"""Targets from config: the facts a pipeline needs from each TargetSpec, and a pipeline with them declared."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from kvdoctor.capacity.budget import Deployment, estimate
from kvdoctor.capacity.config import load_model_config
from kvdoctor.capacity.fields import ModelConfigError
from kvdoctor.capacity.presets import get_gpu, get_model
from kvdoctor.config import Config, TargetSpec
from kvdoctor.diagnosis.target import TargetFacts
from kvdoctor.pipeline import Pipeline
from kvdoctor.query import recording_instance
from kvdoctor.rules.loader import RuleGroup
from kvdoctor.whatif.advisor import Advisor

log = logging.getLogger("kvdoctor")


def _log_warning(message: str) -> None:
    log.warning("%s", message)  # through logging, so `log: {format: json}` holds for it too


def target_facts(spec: TargetSpec, warn: Callable[[str], None] = _log_warning) -> TargetFacts:
    """The spec's facts, with the capacity estimate from its model and GPU (a bad preset is warned about)."""
    facts = TargetFacts(
        spec.max_num_seqs, spec.slo_itl_p95_s, spec.slo_ttft_p95_s, dict(spec.labels), url=spec.safe_url
    )
    key = "model_config" if spec.model_config else "model"
    try:
        model = (
            load_model_config(spec.model_config)
            if spec.model_config
            else get_model(spec.model)
            if spec.model
            else None
        )
        key = "gpu"
        gpu = get_gpu(spec.gpu) if spec.gpu else None
    except (ModelConfigError, KeyError, ValueError) as exc:
        warn(_located(spec, key, f"target {spec.name}: {exc}"))
        return facts
    est = None
    if (
        model is not None and gpu is not None
    ):  # without a GPU only the engine's cache_config_info sizes the cache
        try:
            est = estimate(Deployment(model=model, gpu=gpu, tensor_parallel=spec.tensor_parallel))
        except ValueError as exc:
            warn(_located(spec, "", f"target {spec.name}: {exc}"))
    return replace(facts, estimate=est, gpu_fp8=gpu.fp8_compute if gpu is not None else None)


def _located(spec: TargetSpec, key: str, message: str) -> str:
    where = spec.where(key)
    return f"{where}: {message}" if where else message


def pipeline_for(
    cfg: Config,
    groups: list[RuleGroup],
    recordings: list[str] | None = None,
    advisor: Advisor | None = None,
    names: Mapping[str, str] | None = None,
) -> Pipeline:
    """A pipeline with the config's targets declared; recordings map onto targets by name (or the only one)."""
    pipeline = Pipeline(groups, retention_s=cfg.retention_s, job=cfg.job, advisor=advisor)
    pipeline.runbook_url = cfg.runbook_page()
    pipeline.idle_after_s = cfg.idle_after_s
    specs = {t.name: t for t in cfg.targets}
    declared = [recording_instance(r, names) for r in recordings] if recordings is not None else list(specs)
    for name in declared:
        spec = specs.get(name) or (next(iter(specs.values())) if len(specs) == 1 and recordings else None)
        pipeline.add_target(name, target_facts(spec) if spec is not None else None)
    return pipeline
