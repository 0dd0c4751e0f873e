"""Training-step throughput: forward + backward + optimizer step of a registered model.

``train_throughput`` times zoo's own step (:class:`~zoo.train.step.TrainStep` on a model prepared
as the trainer prepares it) for every requested precision x memory format, interleaved in one
process. Warm-up steps are excluded; each figure is the median of ``runs`` timed steps.
"""

from __future__ import annotations

import itertools
import time
from types import SimpleNamespace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn

from zoo.data.build import DEFAULT_MEAN, DEFAULT_STD
from zoo.models import create_model
from zoo.solver.optimizer import make_optimizer
from zoo.train.execution import Execution, apply_cudnn_benchmark, resolve_execution
from zoo.train.execution import compile_model as compile_in_place
from zoo.train.model_setup import apply_execution
from zoo.train.precision import resolve_channels_last, resolve_precision
from zoo.train.step import TrainStep

from .common import summary, time_interleaved
from .peak import add_percent_of_peak, forward_flops

# The normalisation of the benchmarks' uint8 batches (zoo's defaults, DATA.MEAN / STD empty).
MEAN, STD = DEFAULT_MEAN, DEFAULT_STD


# What the benchmarks' batch stands for (the ``input`` column of their rows).
INPUT_PINNED = "uint8 pinned"
INPUT_PAGEABLE = "uint8"


def pins(device: torch.device) -> bool:
    """Whether the training loader pins its batches for ``device`` (``build_loader`` pins them
    where CUDA is): page-locked host memory, so the copy to the GPU runs asynchronously."""
    return device.type == "cuda"


def input_kind(device: torch.device) -> str:
    """The ``input`` column of a benchmark row: how the batch reaches ``device``."""
    return INPUT_PINNED if pins(device) else INPUT_PAGEABLE


def random_batch(batch: int, frames: int, size: int, num_classes: int, seed: int = 0,
                 image: bool = False,
                 device: Optional[torch.device] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """A reproducible random batch as the training loader hands it over: uint8 pixels, clips
    ``(B, 3, T, S, S)`` stored in ``(B, T, S, S, 3)`` order (channels-last; images ``(B, 3, S, S)``
    stored ``(B, S, S, 3)``), and labels; pinned when ``device`` is a CUDA device (:func:`pins`).

    The training step copies it with ``non_blocking`` and normalises it on the device
    (``TrainStep(normalization=...)``, ``CONFIG.DATA.NORMALIZE_ON "device"``), so a benchmark of
    the step times the same input path as training.
    """
    g = torch.Generator().manual_seed(seed)
    stored = (batch, size, size, 3) if image else (batch, frames, size, size, 3)
    pixels = torch.randint(0, 256, stored, generator=g, dtype=torch.uint8)
    clips = pixels.permute(0, 3, 1, 2) if image else pixels.permute(0, 4, 1, 2, 3)
    labels = torch.randint(0, num_classes, (batch,), generator=g)
    if device is not None and pins(device):
        clips, labels = clips.pin_memory(), labels.pin_memory()
    return clips, labels


def step_execution(device: torch.device, compile_model: bool = False, compile_mode: str = "auto",
                   stem_pad: str = "auto", cudnn_benchmark: str = "auto") -> Execution:
    """The trainer's :class:`~zoo.train.execution.Execution` for a benchmark on ``device`` (one
    process, static shapes): the values are those of ``CONFIG.TRAIN.COMPILE`` (here on or off),
    ``COMPILE_MODE``, ``STEM_PAD_CHANNELS`` and ``CUDNN_BENCHMARK`` ("auto", "True", "False")."""
    train = SimpleNamespace(COMPILE=str(bool(compile_model)), COMPILE_MODE=compile_mode,
                            STEM_PAD_CHANNELS=str(stem_pad), CUDNN_BENCHMARK=str(cudnn_benchmark),
                            MULTIGRID="")
    return resolve_execution(train, device)


def zoo_step(model: nn.Module, device: torch.device, num_classes: int, precision: str = "auto",
             memory_format: str = "auto", route_convs: bool = True, compile_model: bool = False,
             lr: float = 0.01, route_stems: bool = True,
             execution: Optional[Execution] = None) -> Tuple[TrainStep, str, bool]:
    """Prepare ``model`` as zoo's trainer does and return its train step, which normalises uint8
    batches on ``device`` with :data:`MEAN` / :data:`STD` as the trainer's does.

    The optimizer is SGD (momentum 0.9, weight decay 1e-4, constant LR) built as zoo's trainer
    builds it (:func:`~zoo.solver.optimizer.make_optimizer`: PyTorch's fused implementation where
    it exists), so the update is what any framework's SGD step computes. ``execution`` (compile
    and its mode, stem padding, cuDNN benchmark; default :func:`step_execution` with
    ``compile_model``) is applied as the trainer applies it.

    Returns:
        ``(step, precision, channels_last)`` with "auto" resolved for ``device``.
    """
    if execution is None:
        execution = step_execution(device, compile_model)
    precision = resolve_precision(precision, device)
    channels_last = resolve_channels_last(memory_format, precision, device)
    model.to(device).train()
    apply_execution(model, device, channels_last, route_convs, route_stems,
                    stem_pad=execution.stem_pad)
    apply_cudnn_benchmark(execution, device)
    compile_in_place(model, execution)
    optimizer = make_optimizer("SGD", list(model.parameters()), lr, momentum=0.9,
                               weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    step = TrainStep(model, optimizer, scheduler, device, num_classes, precision=precision,
                     channels_last=channels_last, cuda_graphs=execution.cuda_graphs,
                     normalization=(MEAN, STD))
    return step, precision, channels_last


def recording(step, clips: torch.Tensor, labels: torch.Tensor, first: Dict[str, float],
              name: str, seed: int = 0, first_s: Optional[Dict[str, float]] = None):
    """A closure that runs ``step(clips, labels)`` and keeps the loss of its first call (made with
    the initial weights, the RNG seeded with ``seed`` so dropout draws alike) in ``first[name]``,
    and that call's seconds (compiling included, the device waited for) in ``first_s[name]``."""

    def run():
        if name not in first:
            torch.manual_seed(seed)
            start = time.perf_counter()
            first[name] = float(step(clips, labels))  # float() waits for the device
            if first_s is not None:
                first_s[name] = time.perf_counter() - start
        else:
            step(clips, labels)

    return run


def train_throughput(model_name: str, frames: int, size: int, batch: int,
                     precisions: Sequence[str] = ("auto",),
                     memory_formats: Sequence[str] = ("auto",), warmup: int = 2, runs: int = 5,
                     device: Optional[torch.device] = None, num_classes: int = 400,
                     model_kwargs: Optional[Dict[str, Any]] = None, compile_model: bool = False,
                     seed: int = 0, peak: bool = True,
                     gemm_size: Optional[int] = None,
                     execution: Optional[Execution] = None) -> List[Dict[str, Any]]:
    """Clips/s of zoo's train step for each precision x memory format.

    Args:
        model_name: A registered model.
        frames, size, batch: Input ``(batch, 3, frames, size, size)``; image models take
            ``(batch, 3, size, size)``.
        precisions: Values of ``CONFIG.TRAIN.PRECISION`` to time ("auto" included).
        memory_formats: Values of ``CONFIG.TRAIN.MEMORY_FORMAT`` to time.
        warmup: Untimed steps per setting.
        runs: Timed steps per setting (the figure is their median).
        device: Where to train.
        num_classes: Classifier size.
        model_kwargs: Extra builder arguments (e.g. ``{"width": 16}``).
        compile_model: ``torch.compile`` the model (compilation happens during warm-up; the
            first step's seconds are reported as ``first_step_s``).
        seed: Seed of the weights and of the batch.
        peak: Also report percent of peak (:mod:`benchmarks.peak`): the step's counted FLOPs
            per second against a square GEMM timed afterwards in the same precision and process.
        gemm_size: Side of that GEMM (default: :func:`~benchmarks.peak.default_gemm_size`).
        execution: The GPU execution settings (default: :func:`step_execution` with
            ``compile_model``).

    Returns:
        One row per setting: requested and resolved settings, step times, clips/s, first loss
        and, with ``peak``, ``step_gflop``, ``achieved_gflops``, ``peak_gflops``, ``peak_pct``.
    """
    device = device or torch.device("cpu")
    execution = execution or step_execution(device, compile_model)
    compile_model = execution.compile
    kwargs = dict(model_kwargs or {})
    torch.manual_seed(seed)
    probe = create_model(model_name, num_classes=num_classes, **kwargs)
    image = not any(isinstance(m, nn.Conv3d) for m in probe.modules())
    state = probe.state_dict()
    del probe
    clips, labels = random_batch(batch, frames, size, num_classes, seed, image, device)
    fns, first, meta, first_s = {}, {}, {}, {}
    for precision, fmt in itertools.product(precisions, memory_formats):
        model = create_model(model_name, num_classes=num_classes, **kwargs)
        model.load_state_dict(state)
        step, resolved, channels_last = zoo_step(model, device, num_classes, precision, fmt,
                                                 execution=execution)
        name = f"{precision}/{fmt}"
        fns[name] = recording(step, clips, labels, first, name, first_s=first_s)
        meta[name] = {"precision": precision, "memory_format": fmt, "resolved_precision": resolved,
                      "channels_last": channels_last}
    times = time_interleaved(fns, warmup, runs, device)
    common = {"model": model_name, "batch": batch, "frames": 0 if image else frames, "size": size,
              "input": input_kind(device)}
    rows = [_row(common, meta[name], ts, first[name], batch, execution, first_s[name])
            for name, ts in times.items()]
    if peak:
        flops = forward_flops(lambda: create_model(model_name, num_classes=num_classes, **kwargs),
                              tuple(clips.shape))
        add_percent_of_peak(rows, flops, device, gemm_size)
    return rows


def _row(common: Dict[str, Any], meta: Dict[str, Any], times: List[float], first_loss: float,
         batch: int, execution: Execution, first_s: float) -> Dict[str, Any]:
    """One result row of :func:`train_throughput`, its columns in the CSV's order."""
    stats = summary(times)
    return {**common, **meta, "threads": torch.get_num_threads(), "compile": execution.compile,
            "compile_mode": execution.compile_mode if execution.compile else "",
            "stem_pad": execution.stem_pad, "cudnn_benchmark": execution.cudnn_benchmark,
            **stats, "clips_per_s": round(batch / stats["median_s"], 3),
            "first_step_s": round(first_s, 3), "first_loss": round(first_loss, 6)}
