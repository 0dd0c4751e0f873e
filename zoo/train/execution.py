"""How the training step runs on a GPU: ``torch.compile`` (and its CUDA graphs), cuDNN's benchmark
mode and the padded RGB stems. Each ``CONFIG.TRAIN`` key takes ``"auto"``, ``True`` or
``False`` (stored as the strings "auto", "True", "False"); :func:`resolve_execution` turns them
into one :class:`Execution` for the device, the world size and the epoch length.

``"auto"`` decides as follows (docs/training.md, "The step on a GPU"):

* ``COMPILE``: on for a CUDA device when an epoch has at least :data:`AUTO_COMPILE_MIN_ITERS`
  iterations per process, the input shapes are static (no multigrid) and the model is not
  sharded with FSDP; off on the CPU (compiling took minutes there and did not pay,
  docs/benchmarks.md).
* ``COMPILE_MODE``: ``"reduce-overhead"`` (inductor plus CUDA graphs) on a CUDA device with one
  process and static shapes, else ``"default"``. A CUDA-graph mode asked for with multigrid (a
  new graph per shape) falls back to ``"default"`` and says so.
* ``CUDNN_BENCHMARK``: on for a CUDA device with static shapes (cuDNN times its algorithms once
  per shape); off elsewhere. zoo has no deterministic mode; a run that needs bitwise
  repeatability sets it False.
* ``STEM_PAD_CHANNELS``: on for a CUDA device (zoo/accel/stem_pad.py); never on the CPU.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

import torch

from .hooks import HookBase

__all__ = ["AUTO_COMPILE_MIN_ITERS", "CUDA_GRAPH_MODES", "COMPILE_MODES", "CompileTimer",
           "Execution", "resolve_execution", "switch"]

# COMPILE auto: the epoch length (iterations per process) from which compiling is expected to pay
# within the first epoch. Measured on one H200 (16 host cores, torch 2.11, docs/benchmarks.md
# "GPU"): compiling SlowFast-R50 8x8's bf16 step at batch 16 cost 128 s (first step 152 s against
# 24 s eager) and saved 37 ms per step (0.0996 -> 0.0622 s), so it paid back after ~3,400 steps.
AUTO_COMPILE_MIN_ITERS = 3500

COMPILE_MODES = ("auto", "default", "reduce-overhead", "max-autotune",
                 "max-autotune-no-cudagraphs")
# torch.compile modes that record CUDA graphs (a graph per input shape).
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")
SWITCH_VALUES = ("auto", "True", "False")


def switch(value) -> str:
    """A config switch as one of "auto", "True", "False" (a bool is accepted as it is)."""
    return str(value)


@dataclass(frozen=True)
class Execution:
    """The resolved GPU execution settings of one run.

    Attributes:
        compile: ``torch.compile`` the model.
        compile_mode: The resolved mode ("default", "reduce-overhead", ...); meaningful with
            ``compile``.
        cudnn_benchmark: ``torch.backends.cudnn.benchmark`` for the run.
        stem_pad: Pad the RGB stem convs' input channels to 8.
        notes: Why an ``auto`` or an explicit value was overridden (logged once).
    """

    compile: bool = False
    compile_mode: str = "default"
    cudnn_benchmark: bool = False
    stem_pad: bool = False
    notes: Tuple[str, ...] = field(default_factory=tuple)

    @property
    def cuda_graphs(self) -> bool:
        """Whether the compiled step records CUDA graphs."""
        return self.compile and self.compile_mode in CUDA_GRAPH_MODES

    def describe(self) -> str:
        """The settings as a fragment of the trainer's "execution:" line."""
        parts = [f"torch.compile {self.compile_mode}" if self.compile else "eager"]
        if self.cudnn_benchmark:
            parts.append("cuDNN benchmark")
        if self.stem_pad:
            parts.append("stems padded to 8 channels")
        text = ", ".join(parts)
        return text + (f" ({'; '.join(self.notes)})" if self.notes else "")


def resolve_execution(train_cfg, device: torch.device, world_size: int = 1,
                      iters_per_epoch: Optional[int] = None, sharded: bool = False
                      ) -> Execution:
    """The :class:`Execution` that ``CONFIG.TRAIN`` asks for.

    Args:
        train_cfg: ``CONFIG.TRAIN`` (COMPILE, COMPILE_MODE, CUDNN_BENCHMARK, STEM_PAD_CHANNELS,
            MULTIGRID).
        device: The training device.
        world_size: Processes in the run.
        iters_per_epoch: Loader batches per epoch on this process; None (unknown) keeps
            ``COMPILE auto`` off.
        sharded: The model is sharded (``DDP_CONFIG.STRATEGY fsdp`` with several processes).
    """
    cuda = device.type == "cuda"
    static = not train_cfg.MULTIGRID  # the training loader always drops its last partial batch
    notes: List[str] = []
    compile_req = switch(train_cfg.COMPILE)
    # Activation checkpointing keeps BatchNorm's running statistics with a context torch.compile
    # cannot trace (zoo/models/blockwise.py): the two do not run together.
    checkpointed = bool(getattr(train_cfg, "ACT_CHECKPOINT", False))
    if compile_req == "auto":
        compile_on = (cuda and static and not sharded and iters_per_epoch is not None
                      and iters_per_epoch >= AUTO_COMPILE_MIN_ITERS)
        if compile_on and checkpointed:
            notes.append("COMPILE auto: off with ACT_CHECKPOINT True")
            compile_on = False
    else:
        compile_on = compile_req == "True"
    mode = train_cfg.COMPILE_MODE
    if mode == "auto":
        mode = "reduce-overhead" if cuda and static and world_size == 1 else "default"
    elif mode in CUDA_GRAPH_MODES and not static and cuda and compile_on:
        notes.append(f"COMPILE_MODE {mode} needs static shapes; MULTIGRID "
                     f"{train_cfg.MULTIGRID!r} changes them: mode default")
        mode = "default"
    if compile_on and mode in CUDA_GRAPH_MODES and not cuda:
        notes.append(f"COMPILE_MODE {mode}: no CUDA graphs off a CUDA GPU")
    bench_req = switch(train_cfg.CUDNN_BENCHMARK)
    bench = (cuda and static) if bench_req == "auto" else (cuda and bench_req == "True")
    if bench_req == "True" and not cuda:
        notes.append("CUDNN_BENCHMARK True: no effect off a CUDA GPU")
    pad_req = switch(train_cfg.STEM_PAD_CHANNELS)
    pad = cuda if pad_req == "auto" else pad_req == "True"
    return Execution(compile_on, mode, bench, pad, tuple(notes))


def apply_cudnn_benchmark(execution: Execution, device: torch.device) -> None:
    """Set ``torch.backends.cudnn.benchmark`` for a CUDA run (the CPU is left alone)."""
    if device.type == "cuda":
        torch.backends.cudnn.benchmark = execution.cudnn_benchmark


def compile_model(model: torch.nn.Module, execution: Execution) -> None:
    """``model.compile`` in place with the resolved mode (the module and its state-dict keys stay
    as they are); nothing when ``execution.compile`` is off."""
    if execution.compile:
        model.compile(mode=execution.compile_mode)


class CompileTimer(HookBase):
    """Logs what compiling cost: the first step's time against the median of the next ``later``
    steps (both waited for on the device). Only those steps synchronise; later ones are left
    alone. A run shorter than that logs what it has at the end of its first epoch."""

    def __init__(self, mode: str, later: int = 5) -> None:
        self.mode, self.later = mode, later
        self.times: List[float] = []
        self._start = 0.0
        self.done = False

    def _sync(self) -> None:
        if self.trainer.device.type == "cuda":
            torch.cuda.synchronize(self.trainer.device)

    def before_step(self) -> None:
        if not self.done:
            self._sync()
            self._start = time.perf_counter()

    def after_step(self) -> None:
        if self.done:
            return
        self._sync()
        self.times.append(time.perf_counter() - self._start)
        if len(self.times) > self.later:
            self.report()

    def after_epoch(self) -> None:
        if not self.done and self.times:
            self.report()

    def report(self) -> None:
        self.done = True
        first, rest = self.times[0], self.times[1:]
        if not rest:
            self.trainer.logger.info("torch.compile %s: first step %.1f s (compiling included)",
                                     self.mode, first)
            return
        later = statistics.median(rest)
        self.trainer.logger.info(
            "torch.compile %s: first step %.1f s, the next %d steps %.3f s each (median): "
            "compiling took about %.1f s", self.mode, first, len(rest), later,
            max(0.0, first - later))
