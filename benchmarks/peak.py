"""Percent of peak: a training step's achieved FLOP/s against the device's measured matmul peak.

Convention: one multiply-add is 2 FLOPs, both for the model (``torch.utils.flop_counter`` counts
this way; :func:`zoo.models.flops.count_gflops` halves it to report multiply-adds, so it is doubled
back here) and for the GEMM (``n x n`` by ``n x n`` is ``n**3`` multiply-adds = ``2 n**3`` FLOPs).
A training step is counted as 3 forward passes (backward = grad of inputs + grad of weights, each
about one forward). The counter sees matmuls and convolutions only; normalization, activations,
pooling and the optimizer update are not counted (they are memory-bound, a few percent of FLOPs).
"""

from __future__ import annotations

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


def matmul_peak(precision: str, device: torch.device, n: int, repeats: int = 5) -> float:
    """Measured FLOP/s of an ``n x n`` by ``n x n`` matmul in ``precision`` (best of ``repeats``).

    Runs with the process's current thread count and matmul settings (TF32 on CUDA follows
    ``torch.backends.cuda.matmul.allow_tf32``), i.e. those the training step ran under.
    """
    dtype = _GEMM_DTYPES[precision]
    g = torch.Generator().manual_seed(0)
    a = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
    b = torch.randn(n, n, generator=g).to(device=device, dtype=dtype)
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
    """Add ``step_gflop``, ``achieved_gflops``, ``peak_gflops``, ``peak_pct`` to each row.

    Args:
        rows: Rows of :func:`~benchmarks.train.train_throughput` (``resolved_precision`` and
            ``median_s`` are read).
        fwd_flops: FLOPs of one forward pass of the timed batch (:func:`forward_flops`).
        device: Where the steps ran; the GEMM runs there too.
        gemm_size: Side of the peak GEMM (default :func:`default_gemm_size` per precision).
        repeats: Timed GEMMs per precision (the best is kept).

    Returns:
        Peak GFLOP/s per resolved precision.
    """
    sizes: Dict[str, int] = {}
    peaks: Dict[str, float] = {}
    for precision in _unique(r["resolved_precision"] for r in rows):
        sizes[precision] = gemm_size or default_gemm_size(device, precision)
        peaks[precision] = matmul_peak(precision, device, sizes[precision], repeats) / 1e9
    step_gflop = 3.0 * fwd_flops / 1e9
    for row in rows:
        achieved = step_gflop / row["median_s"]
        peak = peaks[row["resolved_precision"]]
        # Significant digits, not decimals: a slow step on a small model achieves ~0.01 GFLOP/s.
        row.update({"step_gflop": round(step_gflop, 3),
                    "achieved_gflops": float(f"{achieved:.6g}"),
                    "peak_gemm_size": sizes[row["resolved_precision"]],
                    "peak_gflops": round(peak, 3),
                    "peak_pct": float(f"{100.0 * achieved / peak:.4g}")})
    return peaks


def _unique(values: Sequence[str]) -> List[str]:
    seen: List[str] = []
    for v in values:
        if v not in seen:
            seen.append(v)
    return seen
