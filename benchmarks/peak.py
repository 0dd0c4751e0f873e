"""Percent of peak: a training step's achieved FLOP/s against the device's measured matmul peak.

Convention: one multiply-add is 2 FLOPs, both for the model (``torch.utils.flop_counter`` counts
this way; :func:`zoo.models.flops.count_gflops` halves it to report multiply-adds, so it is doubled
back here) and for the GEMM (``n x n`` by ``n x n`` is ``n**3`` multiply-adds = ``2 n**3`` FLOPs).
A training step is counted as 3 forward passes (backward = grad of inputs + grad of weights, each
about one forward). The counter sees matmuls and convolutions only; normalization, activations,
pooling and the optimizer update are not counted (they are memory-bound, a few percent of FLOPs).

Like with like: the GEMM runs in the math mode of the step's convolutions (:func:`math_mode`).
An fp32 step on CUDA runs its convolutions in TF32 when cuDNN allows it (PyTorch's default,
``torch.backends.cudnn.allow_tf32``), so its peak is a GEMM with TF32 allowed ("tf32"); a strict
fp32 GEMM would be ~8x slower on an H100 and flatter the step. Elsewhere fp32 is strict ("fp32");
bf16 and fp16 steps are set against a GEMM in that type.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from zoo.models.flops import count_gflops
from zoo.train.precision import native_bf16

from .common import sync

_GEMM_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


def forward_flops(build: Callable[[], nn.Module], input_shape: Tuple[int, ...]) -> float:
    """FLOPs (2 per multiply-add) of one forward pass of ``build()`` on ``input_shape``.

    The model is built on the ``meta`` device, so nothing is computed or allocated.
    """
    with torch.device("meta"):
        model = build()
    return count_gflops(model, input_shape) * 2e9


def default_gemm_size(device: torch.device, precision: str = "fp32") -> int:
    """The side of the square peak GEMM: 8192 on a GPU, 4096 on CPU (large enough to saturate).

    A CPU without bf16 instructions (:func:`~zoo.train.precision.native_bf16`) runs a bf16 or
    fp16 GEMM in an emulated kernel at ~1 GFLOP/s whatever the size (measured at 512 and 1024 on
    an AVX2 EPYC): 1024 then, as 4096 would take minutes and read the same rate.
    """
    if device.type == "cuda":
        return 8192
    if precision != "fp32" and not native_bf16(device):
        return 1024
    return 4096


def _fp32_precision(*nodes) -> Optional[str]:
    """The first set ``fp32_precision`` ("ieee" or "tf32") among ``nodes`` (PyTorch's newer TF32
    switches, where "none" defers to the parent); None on a torch without them."""
    for node in nodes:
        value = getattr(node, "fp32_precision", None)
        if value is None:
            return None
        if value != "none":
            return value
    return "ieee"


def conv_tf32() -> bool:
    """Whether cuDNN may run float32 convolutions in TF32 (what an fp32 step on CUDA does)."""
    cudnn = torch.backends.cudnn
    conv = getattr(cudnn, "conv", None)
    value = _fp32_precision(conv, cudnn, torch.backends) if conv is not None else None
    if value is not None:
        return value == "tf32"
    return bool(cudnn.allow_tf32)  # the older switch (reading it is an error once the new is set)


def math_mode(precision: str, device: torch.device) -> str:
    """The arithmetic a step in ``precision`` on ``device`` does its convolutions in: "tf32" (fp32
    on CUDA with cuDNN's TF32 allowed), "fp32" (strict), "bf16" or "fp16"."""
    if precision == "fp32" and device.type == "cuda" and conv_tf32():
        return "tf32"
    return precision


@contextlib.contextmanager
def _matmul_tf32(enabled: bool):
    """CUDA float32 matmuls with TF32 allowed (``enabled``) or strict; the setting is restored."""
    matmul = torch.backends.cuda.matmul
    if hasattr(matmul, "fp32_precision"):
        old = matmul.fp32_precision
        matmul.fp32_precision = "tf32" if enabled else "ieee"
        try:
            yield
        finally:
            matmul.fp32_precision = old
        return
    old = matmul.allow_tf32
    matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        matmul.allow_tf32 = old


def matmul_peak(mode: str, device: torch.device, n: int, repeats: int = 5) -> float:
    """Measured FLOP/s of an ``n x n`` by ``n x n`` matmul in math ``mode`` (best of ``repeats``).

    ``mode`` is "fp32" (strict: TF32 off for the GEMM on CUDA), "tf32" (float32 tensors, TF32
    allowed; CUDA only), "bf16" or "fp16" (see :func:`math_mode`). Runs with the process's current
    thread count.
    """
    if mode == "tf32" and device.type != "cuda":
        raise ValueError("tf32 is a CUDA math mode; on this device fp32 is strict")
    dtype = _GEMM_DTYPES["fp32" if mode == "tf32" else mode]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    tf32 = _matmul_tf32(mode == "tf32") if device.type == "cuda" else contextlib.nullcontext()
    with tf32:
        torch.mm(a, b)  # untimed: kernel selection, first-touch of the output
        sync(device)
        best = float("inf")
        for _ in range(repeats):
            start = time.perf_counter()
            torch.mm(a, b)
            sync(device)
            best = min(best, time.perf_counter() - start)
    return 2.0 * n ** 3 / best


def add_percent_of_peak(rows: List[Dict[str, Any]], fwd_flops: float, device: torch.device,
                        gemm_size: Optional[int] = None, repeats: int = 5) -> Dict[str, float]:
    """Add ``math_mode``, ``step_gflop``, ``achieved_gflops``, ``peak_gemm_size``,
    ``peak_gflops``, ``peak_pct`` and ``peak_words`` (the percent in words) to each row.

    Args:
        rows: Rows of :func:`~benchmarks.train.train_throughput` (``resolved_precision`` and
            ``median_s`` are read).
        fwd_flops: FLOPs of one forward pass of the timed batch (:func:`forward_flops`).
        device: Where the steps ran; the GEMM runs there too, in the steps' math mode
            (:func:`math_mode`).
        gemm_size: Side of the peak GEMM (default :func:`default_gemm_size` per precision).
        repeats: Timed GEMMs per math mode (the best is kept).

    Returns:
        Peak GFLOP/s per math mode.
    """
    sizes: Dict[str, int] = {}
    peaks: Dict[str, float] = {}
    modes = {r["resolved_precision"]: math_mode(r["resolved_precision"], device) for r in rows}
    for mode in _unique(list(modes.values())):
        sizes[mode] = gemm_size or default_gemm_size(device, "fp32" if mode == "tf32" else mode)
        peaks[mode] = matmul_peak(mode, device, sizes[mode], repeats) / 1e9
    step_gflop = 3.0 * fwd_flops / 1e9
    for row in rows:
        mode = modes[row["resolved_precision"]]
        achieved = step_gflop / row["median_s"]
        # Significant digits, not decimals: a slow step on a small model achieves ~0.01 GFLOP/s.
        row.update({"math_mode": mode, "step_gflop": round(step_gflop, 3),
                    "achieved_gflops": float(f"{achieved:.6g}"),
                    "peak_gemm_size": sizes[mode],
                    "peak_gflops": round(peaks[mode], 3),
                    "peak_pct": float(f"{100.0 * achieved / peaks[mode]:.4g}")})
        row["peak_words"] = _peak_words(row)
    return peaks


def _peak_words(row: Dict[str, Any]) -> str:
    """A row's ``peak_pct`` in words: "12.3% of bf16 peak", or, where the step beat the GEMM
    (a CPU that emulates bf16 runs a small GEMM slower than the step's convolutions), the
    figure with the reason it is no share of a peak."""
    pct, mode = row["peak_pct"], row["math_mode"]
    if pct <= 100.0:
        return f"{pct:.1f}% of {mode} peak"
    return (f"{pct:.1f}% of the {row['peak_gemm_size']}² {mode} GEMM, which ran slower than "
            "the step: no peak on this device")


def _unique(values: Sequence[str]) -> List[str]:
    seen: List[str] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen
