"""The two LR curves, as plain arithmetic: the scheduler draws them per step and config
validation reads them at the warmup's end, so both compute the same numbers."""

from __future__ import annotations

import bisect
import math
from typing import Sequence

__all__ = ["cosine_lr", "step_lr"]


def cosine_lr(base_lr: float, done: float, span: float) -> float:
    """A half cosine from ``base_lr`` to 0 over ``span``, after ``done`` of it (clamped at 0)."""
    frac = min(1.0, done / max(1, span))
    return base_lr * 0.5 * (1.0 + math.cos(math.pi * frac))


def step_lr(base_lr: float, at: float, milestones: Sequence[float], gamma: float,
            factors: Sequence[float] = ()) -> float:
    """``base_lr`` times ``factors[k]`` (or ``gamma ** k``), k the milestones passed at ``at``."""
    passed = bisect.bisect_right(list(milestones), at)
    if factors:
        return base_lr * factors[passed]
    return base_lr * gamma ** passed
