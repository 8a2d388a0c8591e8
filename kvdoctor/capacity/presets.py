"""Built-in model and GPU presets (public config values; no hub access at run time)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import Any

from kvdoctor.capacity.arch import ModelSpec
from kvdoctor.capacity.config import spec_from_config
from kvdoctor.errors import InputError

MIB = 1 << 20
GIB = 1 << 30


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator: memory as the driver reports it, and what it can compute in FP8."""

    name: str
    memory_bytes: int
    compute_capability: float | None = None  # None for non-NVIDIA parts
    arch: str = ""
    fp8_native: bool | None = None  # explicit for parts without a CUDA compute capability
    bandwidth_bytes_per_s: float | None = None  # peak memory bandwidth (data sheet)
    bf16_flops_per_s: float | None = None  # peak dense BF16 tensor throughput (data sheet)

    @property
    def fp8_compute(self) -> bool:
        """FP8 matmuls need compute capability ≥ 8.9 (Ada, Hopper, Blackwell) or an FP8-capable non-NVIDIA part."""
        if self.fp8_native is not None:
            return self.fp8_native
        return self.compute_capability is not None and self.compute_capability >= 8.9

    @property
    def label(self) -> str:
        """Name with compute capability, for humans."""
        cc = f"cc {self.compute_capability}" if self.compute_capability is not None else self.arch
        return f"{self.name} ({self.memory_bytes / GIB:.1f} GiB, {cc})"


class PresetError(InputError, KeyError):
    """An unknown preset name; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


@cache
def _data() -> dict[str, Any]:
    text = resources.files("kvdoctor.capacity").joinpath("presets.json").read_text(encoding="utf-8")
    data: dict[str, Any] = json.loads(text)
    return data


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def _find(table: dict[str, Any], name: str, what: str) -> str:
    want = _norm(name)
    for key, entry in table.items():
        names = [key, entry.get("repo", ""), entry.get("repo", "").split("/")[-1], *entry.get("aliases", [])]
        if want in {_norm(n) for n in names if n}:
            return key
    raise PresetError(f"unknown {what} {name!r}; known: {', '.join(table)}")


def model_names() -> list[str]:
    """Names of the built-in model presets."""
    return list(_data()["models"])


def gpu_names() -> list[str]:
    """Names of the built-in GPU presets."""
    return list(_data()["gpus"])


def model_config(name: str) -> dict[str, Any]:
    """The stored config.json fields of a model preset."""
    entry = _data()["models"][_find(_data()["models"], name, "model")]
    config: dict[str, Any] = entry["config"]
    return config


def get_model(name: str) -> ModelSpec:
    """The ModelSpec of a preset, by name, repo id or repo basename (case-insensitive)."""
    key = _find(_data()["models"], name, "model")
    entry = _data()["models"][key]
    return spec_from_config(entry["config"], key, source=f"preset {key}", params=float(entry["params"]))


def get_gpu(name: str) -> GpuSpec:
    """The GpuSpec of a preset, by name or alias (case-insensitive)."""
    key = _find(_data()["gpus"], name, "GPU")
    e = _data()["gpus"][key]
    bw, fl = e.get("bandwidth_gb_per_s"), e.get("bf16_tflops")
    return GpuSpec(
        key,
        e["memory_mib"] * MIB,
        e.get("compute_capability"),
        e.get("arch", ""),
        e.get("fp8_compute"),
        bw * 1e9 if bw else None,
        fl * 1e12 if fl else None,
    )


def custom_gpu(memory_gib: float) -> GpuSpec:
    """A GPU known only by its memory (--gpu-memory); FP8 support unknown."""
    return GpuSpec(f"{memory_gib:g} GiB GPU", int(memory_gib * GIB))
