"""zoo's SlowFast-R50 8x8 train step against PyTorchVideo's ``create_slowfast``, in one process.

Both models hold the same weights: PyTorchVideo's are copied into zoo's model with the checkpoint
converter (``zoo.models.weights.convert``, scheme "pytorchvideo"). Both get the same batch, as the
training loader hands it over (uint8, pinned on CUDA; :func:`~benchmarks.train.random_batch`),
copied to the device with ``non_blocking`` and normalised there by the same function, the same
thread count and the same optimizer (SGD, momentum 0.9, weight decay 1e-4); head dropout is 0
in both so the loss of a batch is deterministic. PyTorchVideo's step is the plain PyTorch loop its
examples use (slow pathway packed by index, forward, cross-entropy, backward, step); zoo's is
:class:`~zoo.train.step.TrainStep` on a model prepared as zoo's trainer prepares it. Each variant
has its own model copy; the steps of all variants are timed interleaved (``time_interleaved``), and
the first step of each (initial weights, same batch) gives the losses that must agree.
"""

from __future__ import annotations

import contextlib
import statistics
from typing import Any, Dict, List, Optional, Tuple, Union

import torch
import torch.nn as nn
import torch.nn.functional as F

from zoo.data.transforms import normalize_batch
from zoo.models import create_model
from zoo.models.weights.convert import convert_state_dict
from zoo.train.execution import Execution
from zoo.train.precision import memory_format as layout_of
from zoo.train.precision import resolve_channels_last, resolve_precision

from .common import summary, time_interleaved
from .train import MEAN, STD, input_kind, random_batch, recording, zoo_step

MODEL = "slowfast_8x8_resnet50"  # PyTorchVideo's create_slowfast defaults are this net
ALPHA = 4

# (name, side, precision, memory format, routing: True = zoo's (convs and RGB stems), "convs" =
# convs only, False = none). PyTorchVideo's "defaults" are fp32 and contiguous tensors: its train
# loops use no autocast and no memory format.
VARIANTS: List[Tuple[str, str, str, str, Union[bool, str]]] = [
    ("pytorchvideo fp32 (its defaults)", "ptv", "fp32", "contiguous", False),
    ("zoo fp32, contiguous, PyTorch's conv kernels", "zoo", "fp32", "contiguous", False),
    ("zoo fp32, channels-last, PyTorch's conv kernels", "zoo", "fp32", "channels_last", False),
    ("zoo fp32 (zoo's fp32 execution)", "zoo", "fp32", "auto", True),
    ("pytorchvideo bf16 + channels-last", "ptv", "bf16", "channels_last", False),
    ("zoo defaults (PRECISION auto, MEMORY_FORMAT auto)", "zoo", "auto", "auto", True),
    ("zoo bf16 + channels-last (PyTorchVideo's bf16 settings)", "zoo", "bf16", "channels_last",
     True),
    ("zoo bf16 + channels-last, RGB stems in bf16", "zoo", "bf16", "channels_last", "convs"),
]
# indices of VARIANTS that only explain where the gains come from: fp32 (1, 2), the float32 stem
# under bf16 (7)
ABLATION = {1, 2, 7}
STEMS_IN_BF16 = 7
SAME_AS_PTV_BF16 = 6  # timed only where zoo's defaults are not already bf16 + channels-last
PTV_BF16 = 4


def build_pair(width: int, frames: int, size: int, num_classes: int,
               seed: int = 0) -> Tuple[nn.Module, Dict[str, torch.Tensor]]:
    """PyTorchVideo's SlowFast 8x8 (depth 50, slow stem ``width``) and its weights in zoo's keys.

    Freshly initialised, the net's pooled features hardly vary and its logits are ~0, so any two
    nets would give a loss of about ln(classes). To make the loss check mean something, the
    BatchNorm scales and shifts are drawn at random (as a trained net's are not 1 and 0) and the
    head projection gets a std of 2 / sqrt(fan-in): logits of std ~2 that depend on every layer.
    """
    from pytorchvideo.models.slowfast import create_slowfast

    if frames % ALPHA or size % 32:
        raise ValueError(f"frames must be a multiple of {ALPHA} and size of 32, got {frames} "
                         f"and {size}")
    torch.manual_seed(seed)
    pool = size // 32
    ptv = create_slowfast(model_num_class=num_classes, dropout_rate=0.0,
                          stem_dim_outs=(width, width // 8),
                          head_pool_kernel_sizes=((frames // ALPHA, pool, pool),
                                                  (frames, pool, pool)))
    with torch.no_grad():
        for m in ptv.modules():
            if isinstance(m, nn.BatchNorm3d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
    proj = ptv.blocks[-1].proj
    nn.init.normal_(proj.weight, std=2.0 / proj.in_features ** 0.5)
    state, _, _ = convert_state_dict(ptv.state_dict(), "pytorchvideo", MODEL, width=width)
    return ptv, state


def ptv_step(model: nn.Module, device: torch.device, precision: str, channels_last: bool,
             lr: float = 0.01):
    """PyTorchVideo's train step: a closure ``step(clips, labels) -> loss``; a uint8 batch is
    normalised on ``device`` as zoo's step normalises it."""
    model.to(device).train()
    if channels_last:
        model.to(memory_format=torch.channels_last_3d)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=1e-4)

    def step(clips: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        clips = clips.to(device, non_blocking=True)
        labels = labels.to(device, non_blocking=True)
        if clips.dtype == torch.uint8:  # what zoo's step does with the loader's uint8 batch
            clips = normalize_batch(clips, MEAN, STD)
        if channels_last:
            clips = clips.contiguous(memory_format=layout_of(5))
        index = torch.linspace(0, clips.shape[2] - 1, clips.shape[2] // ALPHA,
                               device=device).long()
        inputs = [clips.index_select(2, index), clips]
        ctx = (torch.autocast(device.type, dtype=torch.bfloat16) if precision == "bf16"
               else contextlib.nullcontext())
        with ctx:
            logits = model(inputs)
        loss = F.cross_entropy(logits.float(), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.detach()

    return step


def compare_pytorchvideo(frames: int = 32, size: int = 224, batch: int = 1, width: int = 64,
                         num_classes: int = 400, warmup: int = 2, runs: int = 5,
                         device: Optional[torch.device] = None, ablation: bool = True,
                         seed: int = 0, execution: Optional[Execution] = None,
                         bf16_only: bool = False
                         ) -> Tuple[List[Dict[str, Any]], Dict[str, Any]]:
    """Time every variant of :data:`VARIANTS` and compare them.

    Args:
        frames, size, batch: Fast-pathway input ``(batch, 3, frames, size, size)``.
        width: Slow stem width (64 = SlowFast-R50; smaller for quick tests).
        num_classes: Classifier size.
        warmup, runs: Untimed and timed steps per variant (figures are medians).
        device: Where to train.
        ablation: Also time the two zoo fp32 variants that only explain the fp32 gain.
        seed: Seed of the weights and of the batch.
        execution: zoo's GPU step settings (compile, stem padding, cuDNN benchmark), as
            :func:`~benchmarks.train.zoo_step` takes them; cuDNN's benchmark mode is global, so
            PyTorchVideo's steps run with it too.
        bf16_only: Time only PyTorchVideo's and zoo's bf16 + channels-last steps (the base is
            then PyTorchVideo bf16): half the model copies, and one compile instead of two.

    Returns:
        ``(rows, ratios)``: one row per variant (times, clips/s, first loss, its relative
        difference from the base's: PyTorchVideo fp32, or bf16 with ``bf16_only``) and the
        speed-ups of zoo over PyTorchVideo.
    """
    device = device or torch.device("cpu")
    clips, labels = random_batch(batch, frames, size, num_classes, seed, device=device)
    fns, first, meta = _variant_steps(width, frames, size, num_classes, device, clips, labels,
                                      ablation, seed, execution, bf16_only)
    times = time_interleaved(fns, warmup, runs, device)
    base = VARIANTS[PTV_BF16 if bf16_only else 0][0]
    against = "ptv_bf16" if bf16_only else "ptv_fp32"
    rows = []
    for name, ts in times.items():
        stats = summary(ts)
        rel = abs(first[name] - first[base]) / abs(first[base])
        rows.append({
            "variant": name, **meta[name], "input": input_kind(device), "batch": batch,
            "frames": frames, "size": size,
            "width": width, "threads": torch.get_num_threads(), **stats,
            "clips_per_s": round(batch / stats["median_s"], 4),
            f"speedup_vs_{against}": round(times_ratio(times, base, name), 3),
            "first_loss": round(first[name], 6),
            f"loss_rel_diff_vs_{against}": float(f"{rel:.3g}"),
        })
    return rows, (_bf16_ratios(times, rows) if bf16_only else _ratios(times, rows))


def _variant_steps(width: int, frames: int, size: int, num_classes: int, device: torch.device,
                   clips: torch.Tensor, labels: torch.Tensor, ablation: bool, seed: int,
                   execution: Optional[Execution] = None, bf16_only: bool = False):
    """``(fns, first, meta)``: a recording train step per variant (its own model copy, the same
    weights), the dict its first loss goes to, and its settings; with ``bf16_only`` the two
    bf16 + channels-last variants only."""
    ptv_model, state = build_pair(width, frames, size, num_classes, seed)  # reused once
    ptv_state = ptv_model.state_dict()
    fns, first, meta = {}, {}, {}
    for i, (name, side, precision, fmt, route) in enumerate(VARIANTS):
        if bf16_only:
            if i not in (PTV_BF16, SAME_AS_PTV_BF16):
                continue
        elif i in ABLATION and not ablation:
            continue
        elif i == SAME_AS_PTV_BF16 and _defaults_are_bf16_channels_last(device):
            continue
        if side == "ptv":
            model, ptv_model = ptv_model or build_pair(width, frames, size, num_classes)[0], None
            model.load_state_dict(ptv_state)
            step = ptv_step(model, device, precision, fmt == "channels_last")
            resolved, channels_last = precision, fmt == "channels_last"
        else:
            model = create_model(MODEL, num_classes=num_classes, width=width, dropout=0.0)
            model.load_state_dict(state)
            step, resolved, channels_last = zoo_step(model, device, num_classes, precision, fmt,
                                                     route_convs=bool(route),
                                                     route_stems=route is True,
                                                     execution=execution)
        fns[name] = recording(step, clips, labels, first, name)
        meta[name] = {"side": side, "precision": resolved, "channels_last": channels_last,
                      "conv_routing": bool(route) and device.type == "cpu",
                      "stem_routing": route is True and device.type == "cpu"}
    return fns, first, meta


def _defaults_are_bf16_channels_last(device: torch.device) -> bool:
    precision = resolve_precision("auto", device)
    return precision == "bf16" and resolve_channels_last("auto", precision, device)


def _ratios(times: Dict[str, List[float]], rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The speed-ups of zoo over PyTorchVideo that the README quotes, and their loss checks."""
    by_name = {r["variant"]: r for r in rows}
    base, zoo_fp32, ptv_bf16, zoo_default = (VARIANTS[i][0] for i in (0, 3, 4, 5))
    zoo_bf16 = VARIANTS[SAME_AS_PTV_BF16][0] if VARIANTS[SAME_AS_PTV_BF16][0] in times \
        else zoo_default
    bf16_loss = abs(by_name[zoo_bf16]["first_loss"] - by_name[ptv_bf16]["first_loss"])
    ratios = {
        "zoo_fp32_vs_ptv_fp32": round(times_ratio(times, base, zoo_fp32), 3),
        "zoo_defaults_vs_ptv_defaults": round(times_ratio(times, base, zoo_default), 3),
        "zoo_defaults_vs_ptv_same_settings": round(times_ratio(times, ptv_bf16, zoo_default), 3),
        "zoo_bf16_vs_ptv_bf16": round(times_ratio(times, ptv_bf16, zoo_bf16), 3),
        "zoo_bf16_vs_ptv_bf16_paired": round(paired_ratio(times, ptv_bf16, zoo_bf16), 3),
        "loss_rel_diff_bf16_vs_ptv_bf16": float(
            f"{bf16_loss / abs(by_name[ptv_bf16]['first_loss']):.3g}"),
        "loss_rel_diff_fp32": by_name[zoo_fp32]["loss_rel_diff_vs_ptv_fp32"],
        "loss_rel_diff_defaults": by_name[zoo_default]["loss_rel_diff_vs_ptv_fp32"],
        "zoo_defaults_precision": by_name[zoo_default]["precision"],
    }
    stems_bf16 = VARIANTS[STEMS_IN_BF16][0]
    if stems_bf16 in times:  # the ablation row: zoo's bf16 step with its RGB stems in bf16
        ratios["zoo_fp32_stems_vs_bf16_stems"] = round(times_ratio(times, stems_bf16, zoo_bf16), 3)
        ratios["zoo_fp32_stems_vs_bf16_stems_paired"] = round(
            paired_ratio(times, stems_bf16, zoo_bf16), 3)
    return ratios


def _bf16_ratios(times: Dict[str, List[float]], rows: List[Dict[str, Any]]) -> Dict[str, Any]:
    """The bf16-only comparison's speed-ups (zoo bf16 + channels-last over PyTorchVideo's) and
    its loss check."""
    ptv, zoo = VARIANTS[PTV_BF16][0], VARIANTS[SAME_AS_PTV_BF16][0]
    by_name = {r["variant"]: r for r in rows}
    return {"zoo_bf16_vs_ptv_bf16": round(times_ratio(times, ptv, zoo), 3),
            "zoo_bf16_vs_ptv_bf16_paired": round(paired_ratio(times, ptv, zoo), 3),
            "loss_rel_diff_bf16_vs_ptv_bf16": by_name[zoo]["loss_rel_diff_vs_ptv_bf16"]}


def times_ratio(times: Dict[str, List[float]], slow: str, fast: str) -> float:
    """Median seconds of ``slow`` over median seconds of ``fast`` (how many times faster)."""
    return summary(times[slow])["median_s"] / summary(times[fast])["median_s"]


def paired_ratio(times: Dict[str, List[float]], slow: str, fast: str) -> float:
    """Median over timed steps of ``slow``'s i-th time over ``fast``'s i-th: the two come from the
    same round of :func:`~benchmarks.common.time_interleaved`, seconds apart, so a slow spell
    of the machine that spans a round cancels out (the ratio of medians does not pair them)."""
    return statistics.median(a / b for a, b in zip(times[slow], times[fast]))
