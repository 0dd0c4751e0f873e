"""The non-local block (Wang et al., CVPR 2018), as gluoncv's I3D-NL and PySlowFast build it.

Every position of a ``(B, C, T, H, W)`` map attends to every other one: ``theta``, ``phi`` and ``g``
(1x1x1 convs with bias, ``C -> C/2``) embed the map, the affinity ``theta^T phi`` weighs ``g``, and
``W`` (1x1x1 conv with bias, ``C/2 -> C``) + BN maps the result back and adds it to the input. The
BN's gamma starts at 0, so a fresh block is the identity and can be inserted into a pretrained
network. Parameters for ``C`` channels: ``3 (C^2/2 + C/2) + C^2/2 + C + 2C``.

The affinity is normalised as ``instantiation`` says: ``"softmax"`` (``softmax(theta^T phi /
sqrt(C/2))``, gluoncv and PySlowFast's ``softmax``) or ``"dot_product"`` (divided by the number of
positions attended to, PySlowFast's ``dot_product``). PySlowFast max-pools the map before ``phi``
and ``g`` (``NONLOCAL.POOL``, ``(1, 2, 2)`` by default) and may split time into ``group`` chunks
that attend only within themselves (``NONLOCAL.GROUP``). Pooling and grouping hold no parameters.
PySlowFast's ``conv_theta`` / ``conv_phi`` / ``conv_g`` / ``conv_out`` / ``bn`` are ``theta`` /
``phi`` / ``g`` / ``W`` / ``bn`` here.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

__all__ = ["NonLocal3d"]


class NonLocal3d(nn.Module):
    """Embedded-Gaussian non-local block with a residual connection.

    Args:
        channels: Input and output channels ``C``.
        embed: Embedding channels (default ``C // 2``).
        instantiation: ``"softmax"`` or ``"dot_product"`` normalisation of the affinity.
        pool: Max-pool kernel and stride ``(t, h, w)`` applied before ``phi`` and ``g``
            (``(1, 1, 1)`` = none).
        group: Split the time axis into this many chunks that attend within themselves.
    """

    def __init__(self, channels: int, embed: int = 0, instantiation: str = "softmax",
                 pool: Sequence[int] = (1, 1, 1), group: int = 1) -> None:
        super().__init__()
        if instantiation not in ("softmax", "dot_product"):
            raise ValueError(f"instantiation must be 'softmax' or 'dot_product', got "
                             f"{instantiation!r}")
        if len(pool) != 3 or min(pool) < 1 or group < 1:
            raise ValueError(f"pool must be 3 sizes >= 1 and group >= 1, got {list(pool)}, "
                             f"{group}")
        self.embed = embed or channels // 2
        self.instantiation = instantiation
        self.group = group
        self.pool = (nn.MaxPool3d(tuple(pool), stride=tuple(pool)) if max(pool) > 1
                     else nn.Identity())
        self.theta = nn.Conv3d(channels, self.embed, 1)
        self.phi = nn.Conv3d(channels, self.embed, 1)
        self.g = nn.Conv3d(channels, self.embed, 1)
        self.W = nn.Conv3d(self.embed, channels, 1)
        self.bn = nn.BatchNorm3d(channels)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """gluoncv's init: ``g`` N(0, 0.01), the output BN at zero (the block starts as identity).

        Network-wide inits (``init_3d_weights``) overwrite every BN with ones, so networks call
        this again after them.
        """
        nn.init.normal_(self.g.weight, std=0.01)
        nn.init.zeros_(self.g.bias)
        nn.init.zeros_(self.bn.weight)
        nn.init.zeros_(self.bn.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.group == 1:
            return self._attend(x)
        b, c, t, h, w = x.shape
        if t % self.group:
            raise ValueError(f"non-local group {self.group} does not divide {t} frames")
        # Fold the time chunks into the batch, attend, unfold.
        chunks = x.transpose(1, 2).reshape(b * self.group, t // self.group, c, h, w)
        y = self._attend(chunks.transpose(1, 2))
        return y.transpose(1, 2).reshape(b, t, c, h, w).transpose(1, 2)

    def _attend(self, x: torch.Tensor) -> torch.Tensor:
        b, _, t, h, w = x.shape
        theta = self.theta(x).flatten(2)  # (B, E, N)
        pooled = self.pool(x)
        phi = self.phi(pooled).flatten(2)  # (B, E, M)
        g = self.g(pooled).flatten(2)
        affinity = theta.transpose(1, 2) @ phi  # (B, N, M)
        if self.instantiation == "softmax":
            attn = torch.softmax(affinity * self.embed ** -0.5, dim=-1)
        else:
            attn = affinity / affinity.shape[-1]
        y = (g @ attn.transpose(1, 2)).view(b, self.embed, t, h, w)
        return x + self.bn(self.W(y))


def attach_nonlocal(stage: nn.Sequential, indices: Sequence[int], channels: int, where: str,
                    **kwargs: object) -> None:
    """Follow the blocks ``indices`` of ``stage`` with a :class:`NonLocal3d` of ``channels``.

    Each block applies its ``nonlocal_block`` after its residual sum; ``where`` names the stage
    in the error for an index past its end; ``kwargs`` go to :class:`NonLocal3d`.
    """
    for j in indices:
        if not 0 <= j < len(stage):
            raise ValueError(f"non-local block index {j} in {where}, which has {len(stage)} "
                             "blocks")
        stage[j].nonlocal_block = NonLocal3d(channels, **kwargs)  # type: ignore[arg-type]
