"""Mixup and CutMix on a batch of clips, with soft targets."""

from __future__ import annotations

from typing import Tuple

import numpy as np
import torch
import torch.nn.functional as F


class MixupCutmix:
    """Blend each clip with another clip of the batch (Mixup) or paste a box from it (CutMix).

    The same box covers every frame of a clip. With both alphas > 0 each batch picks one of the
    two with equal probability. Randomness comes from NumPy's global RNG, which the worker setup
    seeds per rank and checkpoints save, so resumed runs repeat it exactly.

    Args:
        num_classes: Size of the soft targets.
        mixup_alpha: Beta(alpha, alpha) for Mixup (0 = off).
        cutmix_alpha: Beta(alpha, alpha) for CutMix (0 = off).
        label_smoothing: Smoothing applied to the one-hot targets before mixing.
    """

    def __init__(self, num_classes: int, mixup_alpha: float, cutmix_alpha: float,
                 label_smoothing: float = 0.0) -> None:
        self.num_classes = num_classes
        self.mixup_alpha = mixup_alpha
        self.cutmix_alpha = cutmix_alpha
        self.smoothing = label_smoothing

    @property
    def enabled(self) -> bool:
        return self.mixup_alpha > 0 or self.cutmix_alpha > 0

    def _targets(self, labels: torch.Tensor) -> torch.Tensor:
        off = self.smoothing / self.num_classes
        onehot = F.one_hot(labels, self.num_classes).float()
        return onehot * (1.0 - self.smoothing) + off

    def __call__(self, clips: torch.Tensor,
                 labels: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Return mixed clips and soft targets ``(B, num_classes)``."""
        targets = self._targets(labels)
        use_cutmix = self.cutmix_alpha > 0 and (self.mixup_alpha <= 0 or np.random.rand() < 0.5)
        alpha = self.cutmix_alpha if use_cutmix else self.mixup_alpha
        lam = float(np.random.beta(alpha, alpha))
        perm = torch.arange(clips.shape[0] - 1, -1, -1, device=clips.device)  # pair i with B-1-i
        if use_cutmix:
            h, w = clips.shape[-2:]
            cut = np.sqrt(1.0 - lam)
            ch, cw = int(h * cut), int(w * cut)
            cy, cx = np.random.randint(h), np.random.randint(w)
            y0, y1 = max(cy - ch // 2, 0), min(cy + ch // 2, h)
            x0, x1 = max(cx - cw // 2, 0), min(cx + cw // 2, w)
            clips = clips.clone()
            clips[..., y0:y1, x0:x1] = clips[perm][..., y0:y1, x0:x1]
            lam = 1.0 - (y1 - y0) * (x1 - x0) / (h * w)  # the area actually pasted
        else:
            clips = clips * lam + clips[perm] * (1.0 - lam)
        return clips, targets * lam + targets[perm] * (1.0 - lam)
