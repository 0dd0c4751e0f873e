"""3D ResNet building blocks shared by SlowFast, Slow and I3D (PySlowFast's layer layout).

Every conv has no bias and is followed by a BatchNorm3d (eps 1e-5, momentum 0.1). A bottleneck puts
its temporal kernel on conv a (``kt x 1 x 1``) and its spatial stride on conv b (``1 x 3 x 3``), as
PySlowFast, PyTorchVideo and MMAction2 (``inflate_style='3x1x1'``) all do.

``temporal_pad`` chooses how temporal convs see the clip's ends: ``"zeros"`` (the published nets)
or ``"replicate"`` (repeat the first/last frame). With ``"replicate"``, a network inflated from a
2D one (weights divided by the temporal kernel size) maps a static clip to exactly the 2D logits;
with zeros the end frames see fewer non-zero taps, so it is only close.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "STAGE_BLOCKS", "Bottleneck", "ConvBN", "Stem", "block_kernels", "init_3d_weights",
    "make_stage",
]

# Bottleneck blocks per stage (res2..res5) for each depth, as in PySlowFast.
STAGE_BLOCKS: Dict[int, Tuple[int, int, int, int]] = {
    18: (2, 2, 2, 2),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}

_PAD_MODES = ("zeros", "replicate")


def _check_pad(temporal_pad: str) -> None:
    if temporal_pad not in _PAD_MODES:
        raise ValueError(f"temporal_pad must be one of {_PAD_MODES}, got {temporal_pad!r}")


class ConvBN(nn.Module):
    """Conv3d (no bias) + BatchNorm3d, optionally followed by ReLU.

    Args:
        in_ch: Input channels.
        out_ch: Output channels.
        kernel: Kernel size ``(t, h, w)``.
        stride: Stride ``(t, h, w)``.
        padding: Padding ``(t, h, w)``.
        relu: Apply ReLU after BN.
    """

    def __init__(
        self,
        in_ch: int,
        out_ch: int,
        kernel: Tuple[int, int, int],
        stride: Tuple[int, int, int] = (1, 1, 1),
        padding: Tuple[int, int, int] = (0, 0, 0),
        relu: bool = False,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv3d(in_ch, out_ch, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm3d(out_ch, eps=1e-5, momentum=0.1)
        self.relu = nn.ReLU(inplace=True) if relu else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.relu(self.bn(self.conv(x)))


class Stem(ConvBN):
    """``kt x 7 x 7`` conv, stride (1, 2, 2), BN, ReLU, then a 1x3x3 max-pool with stride (1, 2, 2).

    Args:
        in_ch: Input channels (3 for RGB).
        out_ch: Output channels.
        kt: Temporal kernel size.
        temporal_pad: ``"zeros"`` or ``"replicate"`` (see the module docstring).
        stride_t: Temporal stride of the conv (2 in gluoncv's I3D, 1 elsewhere).
        pool_stride_t: Temporal stride of the max-pool (2 in gluoncv's I3D, 1 elsewhere).
    """

    def __init__(self, in_ch: int, out_ch: int, kt: int, temporal_pad: str = "zeros",
                 stride_t: int = 1, pool_stride_t: int = 1) -> None:
        _check_pad(temporal_pad)
        # With replicate padding the time axis is padded in forward, the spatial axes by the conv.
        self.time_pad = kt // 2 if temporal_pad == "replicate" else 0
        pad_t = 0 if self.time_pad else kt // 2
        super().__init__(in_ch, out_ch, (kt, 7, 7), (stride_t, 2, 2), (pad_t, 3, 3), relu=True)
        self.pool = nn.MaxPool3d((1, 3, 3), stride=(pool_stride_t, 2, 2), padding=(0, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.time_pad:
            x = F.pad(x, (0, 0, 0, 0, self.time_pad, self.time_pad), mode="replicate")
        return self.pool(super().forward(x))


class Bottleneck(nn.Module):
    """Bottleneck block: a (kt x 1 x 1) -> b (1 x 3 x 3, strided) -> c (1 x 1 x 1), plus shortcut.

    Args:
        in_ch: Input channels.
        inner: Channels of convs a and b.
        out_ch: Output channels.
        kt: Temporal kernel size of conv a.
        stride: Spatial stride of conv b (and of the shortcut).
        temporal_pad: ``"zeros"`` or ``"replicate"`` padding of conv a's time axis.
    """

    def __init__(
        self, in_ch: int, inner: int, out_ch: int, kt: int, stride: int, temporal_pad: str = "zeros"
    ) -> None:
        super().__init__()
        _check_pad(temporal_pad)
        # Conv a has no spatial padding, so its padding_mode only acts on the time axis.
        self.conv_a = nn.Conv3d(in_ch, inner, (kt, 1, 1), padding=(kt // 2, 0, 0), bias=False,
                                padding_mode=temporal_pad)
        self.bn_a = nn.BatchNorm3d(inner)
        self.conv_b = nn.Conv3d(inner, inner, (1, 3, 3), stride=(1, stride, stride),
                                padding=(0, 1, 1), bias=False)
        self.bn_b = nn.BatchNorm3d(inner)
        self.conv_c = nn.Conv3d(inner, out_ch, 1, bias=False)
        self.bn_c = nn.BatchNorm3d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.shortcut: Optional[ConvBN] = None
        if in_ch != out_ch or stride != 1:
            self.shortcut = ConvBN(in_ch, out_ch, (1, 1, 1), stride=(1, stride, stride))
        # Applied after the residual sum when set (the non-local block of gluoncv's I3D-NL nets).
        self.nonlocal_block: Optional[nn.Module] = None
        self.drop_path: nn.Module = nn.Identity()  # stochastic depth (see blockwise.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        out = self.relu(self.bn_a(self.conv_a(x)))
        out = self.relu(self.bn_b(self.conv_b(out)))
        out = self.drop_path(self.bn_c(self.conv_c(out)))
        out = self.relu(out + identity)
        return out if self.nonlocal_block is None else self.nonlocal_block(out)


def block_kernels(pattern: Sequence[int], blocks: int, temporal_blocks: Optional[int] = None
                  ) -> List[int]:
    """Temporal kernel of each block: ``pattern`` repeated over the stage, then kernel 1 after the
    first ``temporal_blocks`` blocks (PySlowFast's ``NUM_BLOCK_TEMP_KERNEL``; None = all)."""
    kts = [pattern[j % len(pattern)] for j in range(blocks)]
    if temporal_blocks is not None:
        kts = [kt if j < temporal_blocks else 1 for j, kt in enumerate(kts)]
    return kts


def make_stage(
    in_ch: int,
    inner: int,
    out_ch: int,
    kts: Sequence[int],
    stride: int,
    temporal_pad: str = "zeros",
) -> nn.Sequential:
    """One bottleneck per entry of ``kts``; only block 0 changes width / stride (has a shortcut)."""
    layers = [Bottleneck(in_ch, inner, out_ch, kts[0], stride, temporal_pad)]
    layers += [Bottleneck(out_ch, inner, out_ch, kt, 1, temporal_pad) for kt in kts[1:]]
    return nn.Sequential(*layers)


def init_3d_weights(model: nn.Module, zero_init_final_bn: bool, head_init_std: float) -> None:
    """PySlowFast's init: MSRA fill for convs, unit BN, small normal linear head.

    Args:
        model: The network to initialise in place.
        zero_init_final_bn: Zero each bottleneck's ``bn_c`` gamma so every block starts as
            identity (PySlowFast's Kinetics configs set ``ZERO_INIT_FINAL_BN: True``).
        head_init_std: Std of the normal init of linear layers.
    """
    for m in model.modules():
        if isinstance(m, nn.Conv3d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm3d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
        elif isinstance(m, nn.Linear):
            nn.init.normal_(m.weight, std=head_init_std)
            nn.init.zeros_(m.bias)
    if zero_init_final_bn:
        for m in model.modules():
            if isinstance(m, Bottleneck):
                nn.init.zeros_(m.bn_c.weight)
