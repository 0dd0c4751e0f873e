"""The non-local block (Wang et al., CVPR 2018) in the embedded-Gaussian form gluoncv's I3D-NL uses.

Every position of a ``(B, C, T, H, W)`` map attends to every other one: ``theta``, ``phi`` and ``g``
(1x1x1 convs with bias, ``C -> C/2``) embed the map, ``softmax(theta^T phi / sqrt(C/2))`` weighs
``g``, and ``W`` (1x1x1 conv with bias, ``C/2 -> C``) + BN maps the result back and adds it to the
input. The BN's gamma starts at 0, so a fresh block is the identity and can be inserted into a
pretrained network. Parameters for ``C`` channels: ``3 (C^2/2 + C/2) + C^2/2 + C + 2C``.
"""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = ["NonLocal3d"]


class NonLocal3d(nn.Module):
    """Embedded-Gaussian non-local block with a residual connection.

    Args:
        channels: Input and output channels ``C``.
        embed: Embedding channels (default ``C // 2``).
    """

    def __init__(self, channels: int, embed: int = 0) -> None:
        super().__init__()
        self.embed = embed or channels // 2
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
        b, _, t, h, w = x.shape
        theta = self.theta(x).flatten(2)  # (B, E, N)
        phi = self.phi(x).flatten(2)
        g = self.g(x).flatten(2)
        attn = torch.softmax(theta.transpose(1, 2) @ phi * self.embed ** -0.5, dim=-1)  # (B, N, N)
        y = (g @ attn.transpose(1, 2)).view(b, self.embed, t, h, w)
        return x + self.bn(self.W(y))
