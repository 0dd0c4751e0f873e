"""Multigrid schedules (Wu et al., "A Multigrid Method for Efficiently Training Video Models",
CVPR 2020), with the rules of PySlowFast's ``MULTIGRID.*`` keys.

* The long cycle trains epoch ranges at smaller (frames, crop) shapes with a batch scaled to keep
  batch x frames x crop^2 constant: :func:`long_cycle_schedule` lays the shapes over each step of
  the Step schedule so that every shape gets the same share of iterations, adds a fine-tuning
  phase at the base shape, and stretches the whole to ``EPOCH_FACTOR`` x the plain epochs;
  :func:`long_cycle_lr` gives the relative LR of each new step (the step's factor x the phase's
  batch factor, the fine-tuning phase split in two).
* The short cycle trains two of every three iterations at a smaller crop with a larger batch
  (:func:`short_cycle_shapes`); alone, it keeps the LR schedule and stretches its epochs by
  ``EPOCH_FACTOR``.

:class:`MultigridPlan` holds the result for one config; the data loader reads the shapes of each
epoch from it and :class:`EpochLRScheduler` follows its LR by fractional epoch.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from ..config import ConfigError
from .lr_scheduler import IterationScheduler

# One long-cycle phase: (step index, (batch factor, frames, crop), end epoch).
Phase = Tuple[int, Tuple[int, int, int], int]


def _round(x: float) -> int:
    """Python's round (halves to even), which PySlowFast's schedule uses."""
    return int(round(x))


def long_cycle_schedule(steps: Sequence[int], max_epoch: int, frames: int, crop: int,
                        long_factors: Sequence[Sequence[float]], short: bool,
                        short_factors: Sequence[float], epoch_factor: float,
                        default_s: int) -> List[Phase]:
    """The long cycle's phases, PySlowFast's ``get_long_cycle_schedule``.

    Args:
        steps: Epochs where the plain Step schedule changes the LR, starting with 0.
        max_epoch: Epochs of the plain schedule.
        frames, crop: The base clip shape.
        long_factors: ``(frames factor, crop factor)`` of each shape, the last ``(1, 1)``.
        short: Whether the short cycle runs too (its shapes count in each phase's mean batch).
        short_factors: The short cycle's two crop factors (of ``default_s``).
        epoch_factor: The run trains this many times ``max_epoch`` epochs.
        default_s: The crop the short-cycle factors refer to.

    Returns:
        ``(step index, (batch factor, frames, crop), end epoch)`` per phase; the last phase is
        the fine-tuning one at the base shape.
    """
    default_size = float(frames * crop * crop)
    mean_batch, shapes_of = [], []
    for t_factor, s_factor in long_factors:
        t, s = _round(frames * t_factor), _round(crop * s_factor)
        sizes = ([(t, default_s * short_factors[0]), (t, default_s * short_factors[1]), (t, s)]
                 if short else [(t, s)])
        shapes = [(_round(default_size / (a * b * b)), a, b) for a, b in sizes]
        mean_batch.append(sum(b for b, _, _ in shapes) / len(shapes))
        shapes_of.append(shapes)
    total_iters = 0.0
    raw: List[Tuple[int, Tuple[int, int, int], float]] = []
    for index in range(len(steps) - 1):
        step_epochs = steps[index + 1] - steps[index]
        for shapes, batch in zip(shapes_of, mean_batch):
            epochs = step_epochs * batch / sum(mean_batch)
            total_iters += epochs / batch
            raw.append((index, shapes[-1], epochs))
    saving = steps[-1] / total_iters
    # The fine-tuning phase after the last step saves iterations in the same ratio.
    raw.append((len(steps) - 1, shapes_of[-1][-1],
                (max_epoch - steps[-1]) / saving * mean_batch[-1]))
    stretch = max_epoch * epoch_factor / sum(e for _, _, e in raw)
    phases, total = [], 0.0
    for index, shape, epochs in raw:
        total += epochs * stretch
        phases.append((index, tuple(int(v) for v in shape), _round(total)))
    return phases


def long_cycle_lr(phases: Sequence[Phase], step_factors: Sequence[float]
                  ) -> Tuple[List[int], List[float], int]:
    """``(steps, relative LRs, epochs)`` of the re-timed Step schedule (PySlowFast's
    ``init_multigrid``): phase i trains at ``step_factors[step index] x batch factor``; the
    fine-tuning phase keeps the LR before it for its first half."""
    steps = [0] + [end for _, _, end in phases]
    steps[-1] = (steps[-2] + steps[-1]) // 2
    lrs = [step_factors[index] * shape[0] for index, shape, _ in phases]
    lrs = lrs[:-1] + [lrs[-2], lrs[-1]]
    return steps, lrs, phases[-1][-1]


def short_cycle_shapes(batch: int, crop: int, short_factors: Sequence[float],
                       default_s: int) -> List[Tuple[int, int]]:
    """``(batch, crop)`` of the three iterations of a short cycle at a long-cycle ``(batch,
    crop)`` (PySlowFast's ``ShortCycleBatchSampler`` and its datasets' short-cycle crop)."""
    out = []
    for f in short_factors:
        out.append((batch * _round((float(crop) / (f * default_s)) ** 2), _round(f * default_s)))
    return out + [(batch, crop)]


@dataclass(frozen=True)
class EpochShape:
    """The clips of one epoch's iterations: ``shapes`` (batch per process, crop) in turn
    (one entry, or the short cycle's three), ``frames`` and the frame-stride range."""

    frames: int
    shapes: Tuple[Tuple[int, int], ...]
    frame_rate: int
    frame_rate_max: int


class MultigridPlan:
    """Shapes, epochs and LR of a multigrid run from its config (``CONFIG.TRAIN.MULTIGRID``).

    Attributes:
        long, short: Which cycles run.
        epochs: Epochs the run trains.
        default_s: The crop the short-cycle factors and the scale jitter refer to.
        phases: The long cycle's phases (:func:`long_cycle_schedule`), or None.
        milestones, lr_factors: The re-timed Step schedule (long cycle), or None.
    """

    def __init__(self, cfg) -> None:
        t, d = cfg.CONFIG.TRAIN, cfg.CONFIG.DATA
        mode = str(t.MULTIGRID)
        self.long, self.short = "long" in mode, "short" in mode
        self.batch, self.frames, self.crop = int(t.BATCH_SIZE), int(d.CLIP_LEN), int(d.CROP_SIZE)
        self.frame_rate = int(d.FRAME_RATE)
        self.default_s = int(t.MULTIGRID_DEFAULT_S) or self.crop
        self.short_factors = [float(f) for f in t.MULTIGRID_SHORT_CYCLE_FACTORS]
        factor = float(t.MULTIGRID_EPOCH_FACTOR)
        self.phases: Optional[List[Phase]] = None
        self.milestones: Optional[List[int]] = None
        self.lr_factors: Optional[List[float]] = None
        if self.long:
            steps = [0] + [int(m) for m in t.LR_MILESTONE]
            if not t.LR_MILESTONE or max(t.LR_MILESTONE) >= t.EPOCH_NUM:
                raise ConfigError(
                    f"CONFIG.TRAIN.MULTIGRID = {mode!r} lays the long cycle over the Step "
                    f"schedule's LR_MILESTONE = {list(t.LR_MILESTONE)}, which needs at least one "
                    f"milestone, all below EPOCH_NUM = {t.EPOCH_NUM}: set them")
            step_factors = (list(t.LR_FACTORS) if t.LR_FACTORS
                            else [t.STEP ** i for i in range(len(steps))])
            self.phases = long_cycle_schedule(
                steps, int(t.EPOCH_NUM), self.frames, self.crop,
                [list(f) for f in t.MULTIGRID_LONG_CYCLE_FACTORS], self.short,
                self.short_factors, factor, self.default_s)
            self.milestones, self.lr_factors, self.epochs = long_cycle_lr(
                self.phases, step_factors)
        else:
            self.epochs = int(t.EPOCH_NUM * factor)

    def base_shape(self, epoch: int) -> Tuple[int, int, int]:
        """``(batch per process, frames, crop)`` of the long cycle at ``epoch`` (the base
        shape without the long cycle)."""
        if not self.long:
            return self.batch, self.frames, self.crop
        shape = self.phases[-1][1]
        for _, phase_shape, end in self.phases:
            if epoch < end:
                shape = phase_shape
                break
        return shape[0] * self.batch, shape[1], shape[2]

    def epoch_shape(self, epoch: int) -> EpochShape:
        batch, frames, crop = self.base_shape(epoch)
        shapes = (short_cycle_shapes(batch, crop, self.short_factors, self.default_s)
                  if self.short else [(batch, crop)])
        rate_max = self.frame_rate * (self.frames // frames) if self.long else self.frame_rate
        return EpochShape(frames, tuple(shapes), self.frame_rate, max(rate_max, self.frame_rate))

    def lr_at_epoch(self, epoch: float) -> float:
        """The long cycle's relative LR at fractional ``epoch`` (before warmup)."""
        index = bisect.bisect_right(self.milestones + [self.epochs], epoch) - 1
        return self.lr_factors[min(max(index, 0), len(self.lr_factors) - 1)]


class EpochLRScheduler(IterationScheduler):
    """Per-step LR given as a function of the fractional epoch (PySlowFast's
    ``get_lr_at_epoch``), for runs whose epochs differ in length; resumable like
    :class:`~zoo.solver.lr_scheduler.WarmupScheduler` (``{"iteration": n}``).

    Args:
        optimizer: The optimizer whose groups are updated (times their ``lr_mult``).
        epoch_steps: Optimizer steps of each epoch.
        lr_at_epoch: LR at a fractional epoch.
    """

    def __init__(self, optimizer: torch.optim.Optimizer, epoch_steps: Sequence[int],
                 lr_at_epoch: Callable[[float], float], base_lr: float) -> None:
        self.optimizer = optimizer
        self.lr_at_epoch = lr_at_epoch
        self.base_lr = base_lr
        self.starts = [0]
        for n in epoch_steps:
            self.starts.append(self.starts[-1] + int(n))
        self.total_iters = self.starts[-1]
        self.iteration = 0
        self._apply()

    def epoch_at(self, it: int) -> float:
        """The fractional epoch of optimizer step ``it``."""
        epoch = min(bisect.bisect_right(self.starts, it) - 1, len(self.starts) - 2)
        length = max(1, self.starts[epoch + 1] - self.starts[epoch])
        return epoch + (it - self.starts[epoch]) / length

    def lr_at(self, it: int) -> float:
        return self.lr_at_epoch(self.epoch_at(it))


def multigrid_lr_function(cfg, plan: MultigridPlan, scale: float) -> Callable[[float], float]:
    """The long cycle's LR at a fractional epoch: ``LR x scale x`` the plan's relative LR, after
    a linear warmup from ``WARMUP_START_LR x scale`` to the schedule's LR at ``WARMUP_EPOCHS``
    (PySlowFast's warmup) when ``USE_WARMUP``."""
    t = cfg.CONFIG.TRAIN
    base = float(t.LR) * scale

    def lr(epoch: float) -> float:
        if t.USE_WARMUP and epoch < t.WARMUP_EPOCHS:
            start, end = float(t.WARMUP_START_LR) * scale, base * plan.lr_at_epoch(t.WARMUP_EPOCHS)
            return start + epoch * (end - start) / t.WARMUP_EPOCHS
        return base * plan.lr_at_epoch(epoch)

    return lr


__all__ = ["EpochLRScheduler", "EpochShape", "MultigridPlan", "long_cycle_lr",
           "long_cycle_schedule", "multigrid_lr_function", "short_cycle_shapes"]
