"""The trainer's side of multigrid training (``CONFIG.TRAIN.MULTIGRID``): the model check, the
epochs' lengths and the LR schedule (rules in zoo/solver/multigrid.py, batches in
zoo/data/multigrid.py)."""

from __future__ import annotations

from typing import List

import torch.nn as nn

from ..config import ConfigError
from ..solver import build_lr_scheduler, lr_scale
from ..solver.multigrid import EpochLRScheduler, multigrid_lr_function


def check_model(cfg, model: nn.Module) -> None:
    """Refuse models whose position tables fix the clip shape (MViT, VideoMAE)."""
    if getattr(model, "fixed_input_shape", False):
        raise ConfigError(
            f"CONFIG.TRAIN.MULTIGRID = {cfg.CONFIG.TRAIN.MULTIGRID!r} changes the clip shape but "
            f"CONFIG.MODEL.NAME = {cfg.CONFIG.MODEL.NAME!r} ({type(model).__name__}) takes one "
            "fixed (frames, crop): set MULTIGRID \"\" or use a CNN family")


def epoch_steps(batches, epochs: int, accum_steps: int) -> List[int]:
    """Optimizer steps of each epoch of a multigrid run (``batches`` is its batch sampler)."""
    steps = [batches.batches_in_epoch(e) // accum_steps for e in range(epochs)]
    if not all(steps):
        e = steps.index(0)
        raise ConfigError(
            f"epoch {e + 1} of the multigrid run has {batches.batches_in_epoch(e)} iterations, "
            f"fewer than CONFIG.TRAIN.ACCUM_STEPS = {accum_steps}: lower ACCUM_STEPS")
    return steps


def describe_plan(plan, epoch: int, steps: List[int], world_size: int, accum_steps: int,
                  peak_lr: float) -> str:
    """The opening log line of a multigrid run: the epochs, the optimizer steps of the whole run,
    and the iterations, clip shape and batches of ``epoch`` (the first one this run trains)."""
    mode = "long+short" if plan.long and plan.short else "long" if plan.long else "short"
    if epoch >= plan.epochs:
        return (f"training epochs {epoch + 1}..{plan.epochs} with CONFIG.TRAIN.MULTIGRID {mode}: "
                f"none left ({sum(steps)} optimizer steps in all)")
    shape = plan.epoch_shape(epoch)
    batches = "/".join(str(b) for b, _ in shape.shapes)
    crops = "/".join(str(c) for _, c in shape.shapes)
    if plan.long:
        peak_lr *= max(plan.lr_factors)  # the long cycle's larger batches train at a larger LR
    return (f"training epochs {epoch + 1}..{plan.epochs} with CONFIG.TRAIN.MULTIGRID {mode}, "
            f"{sum(steps)} optimizer steps in all ({sum(steps[epoch:])} from here); epoch "
            f"{epoch + 1}: {steps[epoch]} steps, {shape.frames} frames, batches of {batches} clips "
            f"per process at crop {crops} (x {world_size} processes x {accum_steps} accumulation), "
            f"peak LR {peak_lr:.5g}")


def build_multigrid_scheduler(cfg, optimizer, plan, steps: List[int], world_size: int):
    """The LR schedule of a multigrid run: the long cycle's re-timed steps by fractional epoch;
    the short cycle alone keeps the configured schedule over its stretched epochs and
    milestones (PySlowFast's ``init_multigrid``)."""
    scale = lr_scale(cfg, world_size)
    if plan.long:
        return EpochLRScheduler(optimizer, steps, multigrid_lr_function(cfg, plan, scale),
                                base_lr=float(cfg.CONFIG.TRAIN.LR) * scale)
    factor = float(cfg.CONFIG.TRAIN.MULTIGRID_EPOCH_FACTOR)
    stretched = cfg.clone()
    stretched.defrost()
    stretched.CONFIG.TRAIN.EPOCH_NUM = plan.epochs
    stretched.CONFIG.TRAIN.LR_MILESTONE = [int(m * factor) for m in cfg.CONFIG.TRAIN.LR_MILESTONE]
    return build_lr_scheduler(stretched, optimizer, steps[0], world_size)
