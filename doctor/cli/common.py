"""Pieces several subcommands share: loading config and rules, building a pipeline with target facts."""

from __future__ import annotations

import sys
from pathlib import Path

from doctor.capacity.budget import Deployment, estimate
from doctor.capacity.config import load_config as load_model_config
from doctor.capacity.fields import ConfigError as ModelConfigError
from doctor.capacity.presets import get_gpu, get_model
from doctor.config import Config, ConfigError, TargetSpec, load_config
from doctor.diagnosis.classify import TargetState
from doctor.pipeline import Pipeline, TargetConfig
from doctor.query import recording_instance
from doctor.rules.loader import Group, RuleLoadError, load_files, rule_files
from doctor.whatif.advisor import Advisor


def load_config_or_exit(path: str | None) -> Config | None:
    """The config, or None after printing every error."""
    try:
        return load_config(path)
    except ConfigError as exc:
        for e in exc.errors:
            print(f"kvdoctor: {e}", file=sys.stderr)
        return None


def load_rules(cfg: Config, override: list[str] | None) -> list[Group] | None:
    """The rule groups, or None after printing every error."""
    try:
        return load_files(rule_files(override or cfg.rules))
    except RuleLoadError as exc:
        for e in exc.errors:
            print(f"kvdoctor: {e}", file=sys.stderr)
        return None


def target_config(spec: TargetSpec) -> TargetConfig:
    """The facts a pipeline needs from a target's config entry."""
    return TargetConfig(spec.max_num_seqs, spec.slo_itl_p95_s, spec.slo_ttft_p95_s, dict(spec.labels))


def target_state(spec: TargetSpec) -> TargetState:
    """A TargetState with the capacity estimate from the target's model and GPU, when given."""
    state = TargetState(spec.name)
    try:
        model = (
            load_model_config(spec.model_config)
            if spec.model_config
            else get_model(spec.model)
            if spec.model
            else None
        )
        gpu = get_gpu(spec.gpu) if spec.gpu else None
    except (ModelConfigError, KeyError, ValueError) as exc:
        print(f"kvdoctor: target {spec.name}: {exc}", file=sys.stderr)
        return state
    if gpu is not None:
        state.gpu_fp8 = gpu.fp8_compute
    if model is not None:
        state.estimate = estimate(Deployment(model=model, gpu=gpu, tensor_parallel=spec.tensor_parallel))
    return state


def build_pipeline(
    cfg: Config, rules: list[str] | None, recordings: list[str] | None = None
) -> Pipeline | None:
    """A pipeline with the config's targets declared; recordings map onto targets by name (or the only one)."""
    groups = load_rules(cfg, rules)
    if groups is None:
        return None
    # replay and check predict the advice's effects inline, on the recording's clock
    pipeline = Pipeline(groups, retention_s=cfg.retention_s, job=cfg.job, advisor=Advisor())
    specs = {t.name: t for t in cfg.targets}
    names = [recording_instance(r) for r in recordings] if recordings is not None else list(specs)
    for name in names:
        spec = specs.get(name) or (next(iter(specs.values())) if len(specs) == 1 and recordings else None)
        if spec is None:
            pipeline.add_target(name)
            continue
        pipeline.add_target(name, target_config(spec))
        state = target_state(spec)
        state.name = name
        pipeline.targets[name] = state
    return pipeline


def existing(paths: list[str]) -> list[str]:
    """Paths that do not exist, for a usage error."""
    return [p for p in paths if not Path(p).exists()]
