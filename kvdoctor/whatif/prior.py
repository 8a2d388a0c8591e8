"""A physical prior for the step time, from the GPU's data sheet and the model's size (roofline, half of peak).

A decode step reads every weight once and the KV of every running request: c0 ≈ weight bytes / bandwidth and
c_kv ≈ KV bytes per token / bandwidth. Each token, decode or prefill, costs ≈ 2 × parameters FLOPs. Achieved
bandwidth and FLOP/s are taken as half of peak (vLLM reaches about that at small batches on an H200); only the
shape is used — the fit scales it to the target's own step times.
"""

from __future__ import annotations

from kvdoctor.capacity.arch import ModelSpec, weights_bytes
from kvdoctor.capacity.presets import GpuSpec
from kvdoctor.whatif.model import StepModel

EFFICIENCY = 0.5


def physical_prior(
    model: ModelSpec,
    gpu: GpuSpec,
    kv_bytes_per_token: float,
    tensor_parallel: int = 1,
    dtype: str = "bf16",
) -> StepModel | None:
    """The roofline step-time shape for this model on this GPU; None when the preset lacks bandwidth or FLOP/s."""
    if not gpu.bandwidth_bytes_per_s or not gpu.bf16_flops_per_s or not model.params:
        return None
    tp = max(1, tensor_parallel)
    bw = gpu.bandwidth_bytes_per_s * EFFICIENCY
    flops = gpu.bf16_flops_per_s * EFFICIENCY
    per_token = 2 * model.params / tp / flops
    return StepModel(
        c0=weights_bytes(model.params, dtype) / tp / bw,
        c_decode=per_token,
        c_prefill=per_token,
        c_kv=kv_bytes_per_token / tp / bw,
        source=f"roofline {model.name} on {gpu.name}",
    )
