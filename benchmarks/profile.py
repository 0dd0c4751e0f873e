"""Where a training step's time goes, per operator (``zoo-benchmark profile``).

zoo's own step (:func:`~benchmarks.train.zoo_step`, the model prepared as the trainer prepares
it, fed the loader's uint8 batch, pinned on CUDA: :func:`~benchmarks.train.random_batch`) runs
``warmup`` untimed steps, then ``runs`` steps under ``torch.profiler``. Each operator's self time
(time in the operator minus the operators it called; device time on GPUs) is divided by ``runs``,
so the table reads "ms per step". Operators are also summed into categories (convolution forward
and backward, batch norm, element-wise, layout conversions and copies, matmul, pooling,
optimizer, other): the usual suspects when a step is far from the device's matmul peak.
"""

from __future__ import annotations

import time
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from zoo.models import create_model
from zoo.train.execution import Execution

from .common import sync
from .train import input_kind, random_batch, zoo_step

# (substring of the operator's name, category): the first match wins, so backward names come first.
CATEGORIES: Sequence[Tuple[str, str]] = (
    ("convolution_backward", "convolution backward"),
    ("convolutionbackward", "convolution backward"),  # autograd's node names, no underscores
    ("batchnorm", "batch norm"),
    ("conv_depthwise", "convolution forward"),
    ("convolution", "convolution forward"),
    ("conv3d", "convolution forward"),
    ("conv2d", "convolution forward"),
    ("batch_norm", "batch norm"),
    ("sgd", "optimizer"),
    ("adam", "optimizer"),
    ("_foreach", "optimizer"),
    ("copy_", "layout and copies"),
    ("_to_copy", "layout and copies"),
    ("tocopy", "layout and copies"),
    ("contiguous", "layout and copies"),
    ("clone", "layout and copies"),
    ("cat", "layout and copies"),
    ("pool", "pooling"),
    ("addmm", "matmul"),
    ("mm", "matmul"),
    ("linear", "matmul"),
    ("relu", "element-wise"),
    ("clamp", "element-wise"),  # ReLU's in-place kernel
    ("threshold", "element-wise"),
    ("add", "element-wise"),
    ("mul", "element-wise"),
    ("div", "element-wise"),
    ("sub", "element-wise"),
    ("fill_", "element-wise"),
    ("zero_", "element-wise"),
    ("softmax", "element-wise"),
    ("nll_loss", "element-wise"),
    ("sum", "element-wise"),
    ("mean", "element-wise"),
)


def category(op_name: str) -> str:
    """The category of an operator name such as ``aten::convolution_backward``."""
    name = op_name.split("::")[-1].lower()
    return next((cat for key, cat in CATEGORIES if key in name), "other")


def step_profile(model_name: str, frames: int, size: int, batch: int, precision: str = "auto",
                 memory_format: str = "auto", warmup: int = 2, runs: int = 3,
                 device: Optional[torch.device] = None, num_classes: int = 400,
                 model_kwargs: Optional[Dict[str, Any]] = None,
                 execution: Optional[Execution] = None
                 ) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Per-operator self time of zoo's training step, per step (``execution``: the GPU step
    settings, as :func:`~benchmarks.train.zoo_step` takes them).

    Returns:
        ``(rows, info)``: one row per operator, slowest first (``operator``, ``category``,
        ``ms_per_step``, ``percent``, ``calls_per_step``); ``info`` holds the resolved settings,
        the step's wall time (``step_ms``), the sum of self times and the per-category totals.
    """
    device = device or torch.device("cpu")
    model = create_model(model_name, num_classes=num_classes, **dict(model_kwargs or {}))
    image = not any(isinstance(m, nn.Conv3d) for m in model.modules())
    step, resolved, channels_last = zoo_step(model, device, num_classes, precision, memory_format,
                                             execution=execution)
    clips, labels = random_batch(batch, frames, size, num_classes, image=image, device=device)
    for _ in range(warmup):
        step(clips, labels)
    sync(device)
    activities = [torch.profiler.ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as prof:
        start = time.perf_counter()
        for _ in range(runs):
            step(clips, labels)
        sync(device)
        wall_ms = (time.perf_counter() - start) * 1000 / runs
    rows = _operator_rows(prof.key_averages(), runs, device.type == "cuda")
    total = sum(r["ms_per_step"] for r in rows)
    for r in rows:
        r["percent"] = round(100 * r["ms_per_step"] / total, 2) if total else 0.0
    by_cat: Dict[str, float] = {}
    for r in rows:
        by_cat[r["category"]] = round(by_cat.get(r["category"], 0.0) + r["ms_per_step"], 3)
    info = {"model": model_name, "batch": batch, "frames": 0 if image else frames, "size": size,
            "precision": resolved, "channels_last": channels_last, "input": input_kind(device),
            "execution": execution.describe() if execution is not None else "",
            "threads": torch.get_num_threads(), "runs": runs,
            "self_ms_per_step": round(total, 3), "step_ms": round(wall_ms, 3),
            "categories": dict(sorted(by_cat.items(), key=lambda kv: -kv[1]))}
    return rows, info


def _operator_rows(events, runs: int, on_gpu: bool) -> List[Dict[str, Any]]:
    rows = []
    for e in events:
        us = e.self_device_time_total if on_gpu else e.self_cpu_time_total
        if us <= 0:
            continue
        rows.append({"operator": e.key, "category": category(e.key),
                     "ms_per_step": round(us / 1000 / runs, 3),
                     "calls_per_step": round(e.count / runs, 1)})
    return sorted(rows, key=lambda r: -r["ms_per_step"])
