"""X3D (Feichtenhofer, CVPR 2020): a 3D ResNet expanded along width, depth, frames and resolution
from a tiny base, with channel-wise 3x3x3 convs, squeeze-excitation and swish.

Layer for layer PySlowFast's ``X3D`` (``slowfast/models/video_model_builder.py``), which
PyTorchVideo's ``create_x3d`` reproduces but for one batch norm: PySlowFast normalises every
shortcut conv, PyTorchVideo only those that change the width, so its stage-2 shortcut (stride 2,
24 -> 24 channels) has no BN (48 parameters fewer). zoo builds PySlowFast's by default
(``shortcut_bn="all"``); ``shortcut_bn="width_change"`` builds PyTorchVideo's, the network its
files hold (``MODEL.KWARGS ['shortcut_bn', 'width_change']``). A PyTorchVideo file given to the
default model is refused with one line naming that kwarg: a BN standing in as an identity would
normalise with batch statistics in train mode and fine-tune another network.

Module tree (``n`` = stage 2..5, ``j`` = block)::

    stem.conv_xy            1x3x3 conv, stride 1x2x2 (3 -> 24)
    stem.conv_t, stem.bn    5x1x1 channel-wise conv, BN, ReLU
    res{n}.{j}.conv_a/bn_a  1x1x1 conv to the inner width (bottleneck factor 2.25), BN, ReLU
    res{n}.{j}.conv_b/bn_b  3x3x3 channel-wise conv (stride 1x2x2 in block 0), BN
    res{n}.{j}.se.fc1/fc2   squeeze-excitation (blocks 0, 2, 4, ...), then swish
    res{n}.{j}.conv_c/bn_c  1x1x1 conv to the stage width, BN; + shortcut, ReLU
    res{n}.0.shortcut       1x1x1 conv (stride 1x2x2) + BN (conv only where the width stays the
                            same and shortcut_bn="width_change": PyTorchVideo's res2.0)
    head.conv_5/bn_5        1x1x1 conv to the inner width, BN, ReLU, global average pool
    head.lin_5, head.proj   1x1x1 conv to 2048, ReLU, dropout, linear classifier

The model returns logits (PySlowFast's and PyTorchVideo's heads add a softmax).
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from .blocks3d import init_3d_weights
from .blockwise import StageLayersMixin
from .classifier import ClassifierMixin
from .facts import video_facts
from .registry import register_model

__all__ = ["X3D", "round_width"]

# PySlowFast's X3D configs normalise with these (Kinetics-400 statistics).
_MEAN = (0.45, 0.45, 0.45)
_STD = (0.225, 0.225, 0.225)
# Base blocks per stage and base stage widths (X3D.DIM_C1 = 12, doubled per stage).
_BASE_DEPTHS = (1, 2, 5, 3)
_BASE_C1 = 12


def round_width(width: float, multiplier: float, min_width: int = 8, divisor: int = 8) -> int:
    """``width * multiplier`` rounded to a multiple of ``divisor`` (at least ``min_width``, and
    never below 90% of the exact value): PySlowFast's and PyTorchVideo's rounding."""
    width *= multiplier
    rounded = max(min_width, int(width + divisor / 2) // divisor * divisor)
    if rounded < 0.9 * width:
        rounded += divisor
    return int(rounded)


class SqueezeExcitation(nn.Module):
    """Channel gates from the clip's average: avg pool, 1x1x1 conv, ReLU, 1x1x1 conv, sigmoid."""

    def __init__(self, channels: int, ratio: float) -> None:
        super().__init__()
        reduced = round_width(channels, ratio)
        self.fc1 = nn.Conv3d(channels, reduced, 1, bias=True)
        self.fc2 = nn.Conv3d(reduced, channels, 1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = self.fc2(torch.relu(self.fc1(x.mean((2, 3, 4), keepdim=True))))
        return x * torch.sigmoid(gate)


# Which shortcut convs a BN follows: every one (PySlowFast), or those that change the width
# (PyTorchVideo's create_x3d_res_block).
SHORTCUT_BN = ("all", "width_change")


class _Shortcut(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int, norm: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv3d(in_ch, out_ch, 1, stride=(1, stride, stride), bias=False)
        self.bn = nn.BatchNorm3d(out_ch) if norm else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class X3DBlock(nn.Module):
    """One X3D bottleneck: 1x1x1, channel-wise 3x3x3 (+ SE, swish), 1x1x1, plus the shortcut."""

    def __init__(self, in_ch: int, inner: int, out_ch: int, stride: int, se_ratio: float,
                 shortcut_bn: str = "all") -> None:
        super().__init__()
        self.conv_a = nn.Conv3d(in_ch, inner, 1, bias=False)
        self.bn_a = nn.BatchNorm3d(inner)
        self.conv_b = nn.Conv3d(inner, inner, 3, stride=(1, stride, stride), padding=1,
                                groups=inner, bias=False)
        self.bn_b = nn.BatchNorm3d(inner)
        self.se = SqueezeExcitation(inner, se_ratio) if se_ratio > 0 else nn.Identity()
        self.conv_c = nn.Conv3d(inner, out_ch, 1, bias=False)
        self.bn_c = nn.BatchNorm3d(out_ch)
        norm = shortcut_bn == "all" or in_ch != out_ch
        self.shortcut = (_Shortcut(in_ch, out_ch, stride, norm) if in_ch != out_ch or stride != 1
                         else nn.Identity())
        self.drop_path: nn.Module = nn.Identity()  # stochastic depth (see blockwise.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn_a(self.conv_a(x)))
        y = nn.functional.silu(self.se(self.bn_b(self.conv_b(y))))
        y = self.drop_path(self.bn_c(self.conv_c(y)))
        return torch.relu(y + self.shortcut(x))


class X3DStem(nn.Module):
    """A 1x3x3 conv (stride 1x2x2), a channel-wise temporal conv, BN and ReLU."""

    def __init__(self, in_ch: int, out_ch: int, kt: int = 5) -> None:
        super().__init__()
        self.conv_xy = nn.Conv3d(in_ch, out_ch, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1),
                                 bias=False)
        self.conv_t = nn.Conv3d(out_ch, out_ch, (kt, 1, 1), padding=(kt // 2, 0, 0),
                                groups=out_ch, bias=False)
        self.bn = nn.BatchNorm3d(out_ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.bn(self.conv_t(self.conv_xy(x))))


class X3DHead(nn.Module):
    """1x1x1 conv + BN + ReLU, global average pool, 1x1x1 conv + ReLU, dropout, linear."""

    def __init__(self, in_ch: int, inner: int, width: int, num_classes: int,
                 dropout: float) -> None:
        super().__init__()
        self.conv_5 = nn.Conv3d(in_ch, inner, 1, bias=False)
        self.bn_5 = nn.BatchNorm3d(inner)
        self.lin_5 = nn.Conv3d(inner, width, 1, bias=False)
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn_5(self.conv_5(x))).mean((2, 3, 4), keepdim=True)
        x = torch.relu(self.lin_5(x)).flatten(1)
        return self.proj(self.dropout(x))


class X3D(StageLayersMixin, ClassifierMixin, nn.Module):
    """X3D with PySlowFast's layers (see the module docstring).

    Args:
        num_classes: Output classes.
        width_factor: X3D.WIDTH_FACTOR (2.0 for every published size).
        depth_factor: X3D.DEPTH_FACTOR: 2.2 (XS, S, M) or 5.0 (L).
        bottleneck_factor: Inner width over stage width (2.25).
        head_width: X3D.DIM_C5, the width before the classifier (2048).
        se_ratio: Squeeze-excitation reduction (0.0625; 0 = none).
        dropout: Dropout before the classifier (PySlowFast's 0.5).
        in_channels: Input channels.
        drop_path: Stochastic depth of the last residual block (linear from 0 at the first).
        shortcut_bn: ``"all"``: a BN after every shortcut conv (PySlowFast's X3D, its files and
            the parameter counts above); ``"width_change"``: only after those that change the
            width, so res2.0's strided 24 -> 24 shortcut is a bare conv (PyTorchVideo's
            ``create_x3d``, the network its files hold; 48 parameters fewer).
    """

    classifier_name = "head.proj"

    def __init__(self, num_classes: int = 400, width_factor: float = 2.0,
                 depth_factor: float = 2.2, bottleneck_factor: float = 2.25,
                 head_width: int = 2048, se_ratio: float = 0.0625, dropout: float = 0.5,
                 in_channels: int = 3, head_init_std: float = 0.01,
                 drop_path: float = 0.0, shortcut_bn: str = "all") -> None:
        super().__init__()
        if shortcut_bn not in SHORTCUT_BN:
            raise ValueError(f"shortcut_bn must be one of {SHORTCUT_BN} (MODEL.KWARGS), got "
                             f"{shortcut_bn!r}")
        stem_width = round_width(_BASE_C1, width_factor)
        self.stem = X3DStem(in_channels, stem_width)
        base = _BASE_C1
        in_ch = stem_width
        for n, blocks in enumerate(_BASE_DEPTHS):
            if n > 0:
                base = round_width(base, 2.0)
            out_ch = round_width(base, width_factor)
            inner = int(bottleneck_factor * out_ch)
            depth = int(math.ceil(depth_factor * blocks))
            stage = nn.Sequential(*[
                X3DBlock(in_ch if j == 0 else out_ch, inner, out_ch, 2 if j == 0 else 1,
                         se_ratio if j % 2 == 0 else 0.0, shortcut_bn)
                for j in range(depth)])
            self.add_module(f"res{n + 2}", stage)
            in_ch = out_ch
        self.head = X3DHead(in_ch, inner, head_width, num_classes, dropout)
        init_3d_weights(self, zero_init_final_bn=False, head_init_std=head_init_std)
        for m in self.modules():
            if isinstance(m, X3DBlock):
                nn.init.zeros_(m.bn_c.weight)  # every block starts as its shortcut
        self.set_drop_path_rate(drop_path)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The res5 feature map ``(B, C, T, H', W')``."""
        x = self.stem(x)
        return self.res5(self.res4(self.res3(self.res2(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        return self.head(self.forward_features(x))


def _variant(size: str, frames: int, stride: int, crop: int, depth_factor: float,
             params: int, gflops: float, top1: float) -> None:
    """Register ``x3d_{size}`` (lower case): PySlowFast's ``X3D_{size}`` config."""
    doc = f"""X3D-{size}: {frames} frames at stride {stride}, {crop}x{crop}, depth factor
    {depth_factor} (PySlowFast's ``X3D_{size}`` config).

    Args:
        num_classes: Output classes.
        **kwargs: :class:`X3D` arguments (``dropout``, ``se_ratio``, ``head_width``,
            ``shortcut_bn``, ...).
    """
    facts = video_facts(frames, stride, crop, _MEAN, _STD, params=params, gflops=gflops,
                        published_top1=top1)
    register_model(f"x3d_{size.lower()}", X3D, facts, doc, depth_factor=depth_factor)


# Params at 400 classes equal PySlowFast's (3,794,322 for XS/S/M, 6,153,432 for L); gflops:
# multiply-adds of one view at the input of the facts, counted by torch.utils.flop_counter
# (recounted in the tests); top-1: PySlowFast's model zoo (Kinetics-400, 10 x 3 views).
_variant("XS", 4, 12, 160, 2.2, 3_794_322, 0.61, 69.5)
_variant("S", 13, 6, 160, 2.2, 3_794_322, 1.96, 73.5)
_variant("M", 16, 5, 224, 2.2, 3_794_322, 4.73, 76.2)
_variant("L", 16, 5, 312, 5.0, 6_153_432, 18.37, 77.5)
