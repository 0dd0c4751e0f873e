"""Per-iteration learning rate: optional linear warmup, then cosine decay or steps."""

from __future__ import annotations

from typing import List, Optional, Sequence

import torch

from ..utils.lr_curves import cosine_lr, step_lr


class IterationScheduler:
    """Sets every param group's LR (times its ``lr_mult``) from :meth:`lr_at` of the optimizer
    step count; ``state_dict`` (``{"iteration": n}``) makes it resumable. Subclasses define
    ``lr_at`` and call :meth:`_apply` at the end of ``__init__``."""

    optimizer: torch.optim.Optimizer
    iteration: int = 0

    def lr_at(self, it: int) -> float:
        raise NotImplementedError

    def _apply(self) -> None:
        lr = self.lr_at(self.iteration)
        for group in self.optimizer.param_groups:
            group["lr"] = lr * group.get("lr_mult", 1.0)

    def step(self) -> None:
        """Advance one iteration (call after optimizer.step())."""
        self.iteration += 1
        self._apply()

    def get_last_lr(self) -> float:
        return self.lr_at(self.iteration)

    def state_dict(self) -> dict:
        return {"iteration": self.iteration}

    def load_state_dict(self, state: dict) -> None:
        self.iteration = int(state["iteration"])
        self._apply()


class WarmupScheduler(IterationScheduler):
    """Linear warmup, then cosine or steps, per optimizer step.

    Args:
        optimizer: The optimizer whose groups are updated.
        base_lr: The cosine's LR at its start, or the Step schedule's before its first milestone.
        total_iters: Iterations in the whole run.
        policy: ``"Cosine"`` (decays to 0 at ``total_iters``) or ``"Step"``.
        cosine_after_warmup: True = the cosine starts at ``base_lr`` where the warmup ends and
            spans the iterations after it (VideoMAE); False = it spans every iteration from 0,
            and the warmup climbs to its value where the warmup ends (PySlowFast's
            ``COSINE_AFTER_WARMUP`` False, MMAction2, timm). ``"Step"`` ignores it.
        milestones: Iterations at which ``Step`` multiplies the LR by ``gamma``.
        gamma: Multiplier for ``Step``.
        factors: ``Step`` with explicit relative LRs: ``base_lr * factors[i]`` from milestone i
            on (``factors[0]`` before the first); needs ``len(milestones) + 1`` entries.
            Empty = ``gamma`` at each milestone.
        warmup_iters: Length of the linear warmup (0 = none).
        warmup_start_lr: LR at iteration 0 of the warmup.
        warmup_end_lr: LR at the end of warmup; None = the schedule's LR at ``warmup_iters``
            (``base_lr`` for a cosine after the warmup, the cosine's value there for one from
            0, ``base_lr`` times the step's factor for Step), where PySlowFast, VideoMAE and
            MMAction2 end it.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        base_lr: float,
        total_iters: int,
        policy: str = "Cosine",
        cosine_after_warmup: bool = True,
        milestones: List[int] = (),
        gamma: float = 0.1,
        factors: Sequence[float] = (),
        warmup_iters: int = 0,
        warmup_start_lr: float = 0.0,
        warmup_end_lr: Optional[float] = None,
    ) -> None:
        self.optimizer = optimizer
        self.base_lr = base_lr
        self.total_iters = max(1, total_iters)
        self.policy = policy
        self.cosine_after_warmup = bool(cosine_after_warmup)
        self.milestones = sorted(milestones)
        self.gamma = gamma
        self.factors = list(factors)
        if self.factors and len(self.factors) != len(self.milestones) + 1:
            raise ValueError(f"factors needs len(milestones) + 1 = {len(self.milestones) + 1} "
                             f"entries, got {len(self.factors)}")
        self.warmup_iters = warmup_iters
        self.warmup_start_lr = warmup_start_lr
        self.warmup_end_lr = (self._after_warmup(warmup_iters) if warmup_end_lr is None
                              else warmup_end_lr)
        self.iteration = 0
        self._apply()

    def lr_at(self, it: int) -> float:
        if it < self.warmup_iters:
            frac = it / self.warmup_iters
            return self.warmup_start_lr + frac * (self.warmup_end_lr - self.warmup_start_lr)
        return self._after_warmup(it)

    def peak_lr(self) -> float:
        """The largest LR of the schedule: where the warmup starts or ends, or where a step
        begins (a cosine from iteration 0 never reaches ``base_lr`` after a warmup)."""
        points = {0, min(self.warmup_iters, self.total_iters)}
        points.update(m for m in self.milestones if m <= self.total_iters)
        return max(self.lr_at(it) for it in points)

    def _after_warmup(self, it: int) -> float:
        if self.policy == "Cosine":
            # The cosine runs from its start (the warmup's end, or iteration 0) and reaches 0 at
            # the end; from 0, the warmup replaces its first iterations.
            start = self.warmup_iters if self.cosine_after_warmup else 0
            return cosine_lr(self.base_lr, it - start, self.total_iters - start)
        return step_lr(self.base_lr, it, self.milestones, self.gamma, self.factors)


def lr_scale(cfg, world_size: int) -> float:
    """The linear scaling rule: global batch / CONFIG.TRAIN.REFERENCE_BATCH (1 when that is 0)."""
    t = cfg.CONFIG.TRAIN
    if t.REFERENCE_BATCH <= 0:
        return 1.0
    return t.BATCH_SIZE * t.ACCUM_STEPS * world_size / t.REFERENCE_BATCH


def build_lr_scheduler(cfg, optimizer: torch.optim.Optimizer, steps_per_epoch: int,
                       world_size: int = 1) -> WarmupScheduler:
    """Schedule from CONFIG.TRAIN.{LR, LR_POLICY, COSINE_AFTER_WARMUP, LR_MILESTONE, STEP,
    LR_FACTORS, USE_WARMUP, WARMUP_*},
    counted in optimizer steps, with the LRs scaled by ``lr_scale``."""
    t = cfg.CONFIG.TRAIN
    scale = lr_scale(cfg, world_size)
    warmup = int(round(t.WARMUP_EPOCHS * steps_per_epoch)) if t.USE_WARMUP else 0
    return WarmupScheduler(
        optimizer,
        base_lr=t.LR * scale,
        total_iters=t.EPOCH_NUM * steps_per_epoch,
        policy=t.LR_POLICY,
        cosine_after_warmup=bool(t.COSINE_AFTER_WARMUP),
        milestones=[m * steps_per_epoch for m in t.LR_MILESTONE],
        gamma=t.STEP,
        factors=list(t.LR_FACTORS),
        warmup_iters=warmup,
        warmup_start_lr=t.WARMUP_START_LR * scale,
        # 0 = the schedule's LR where the warmup ends (validation refuses any other value)
        warmup_end_lr=t.WARMUP_END_LR * scale if t.WARMUP_END_LR else None,
    )
