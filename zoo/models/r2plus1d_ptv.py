"""R(2+1)D-50 as PyTorchVideo builds it (``pytorchvideo.models.r2plus1d.create_r2plus1d``, hub
``r2plus1d_r50``; PySlowFast's ``PTVR2plus1D``, config ``R2PLUS1D_16x4_R50``): a bottleneck ResNet
whose middle conv is a (2+1)D conv at the inner width, temporal part first.

It differs from gluoncv's ``r2plus1d_resnet50`` (zoo/models/r2plus1d.py): no parameter-matched
middle width, the temporal 3x1x1 conv comes before the spatial 1x3x3 one, the stem is a single
1x7x7 conv without max-pool, and res2 already halves space (PyTorchVideo's spatial strides 2, 2,
2, 2; temporal strides 1, 1, 2, 2).

Module tree (``n`` = stage 2..5, ``j`` = block; widths of R50 at ``width`` 64)::

    stem.conv, stem.bn          1x7x7 conv, stride 1x2x2 (3 -> 64), BN, ReLU
    res{n}.{j}.conv_a/bn_a      1x1x1 conv to the inner width (64, 128, 256, 512), BN, ReLU
    res{n}.{j}.conv_b.conv_t    3x1x1 conv (temporal stride 2 in block 0 of res4, res5)
    res{n}.{j}.conv_b.bn        BN, ReLU (inside the (2+1)D conv)
    res{n}.{j}.conv_b.conv_xy   1x3x3 conv (spatial stride 2 in block 0)
    res{n}.{j}.bn_b             BN, ReLU
    res{n}.{j}.conv_c/bn_c      1x1x1 conv to 4x the inner width, BN; + shortcut, ReLU
    res{n}.0.shortcut.conv/bn   1x1x1 conv with block 0's stride, BN
    head.proj                   global average pool, dropout, linear classifier

PyTorchVideo's head average-pools with a fixed (4, 7, 7) window (PySlowFast: frames / 4 and crop
/ 32), projects every window and averages the outputs, then (hub default) applies a softmax. zoo
pools globally and returns logits: the same numbers at the 16x224x224 input, and any input size
works.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from .blocks3d import STAGE_BLOCKS, init_3d_weights
from .blockwise import StageLayersMixin
from .classifier import ClassifierMixin
from .facts import KINETICS_MEAN, KINETICS_STD, video_facts
from .registry import register_model

__all__ = ["R2Plus1DPTV"]

# PyTorchVideo's stage strides: (temporal, spatial) of block 0's (2+1)D conv and shortcut.
_STAGE_STRIDES = ((1, 2), (1, 2), (2, 2), (2, 2))


class Conv2Plus1D(nn.Module):
    """A 3x1x1 temporal conv, BN, ReLU, then a 1x3x3 spatial conv, all at one width.

    Args:
        channels: Input, inner and output channels.
        stride_t: Temporal stride of the temporal conv.
        stride_s: Spatial stride of the spatial conv.
    """

    def __init__(self, channels: int, stride_t: int, stride_s: int) -> None:
        super().__init__()
        self.conv_t = nn.Conv3d(channels, channels, (3, 1, 1), stride=(stride_t, 1, 1),
                                padding=(1, 0, 0), bias=False)
        self.bn = nn.BatchNorm3d(channels)
        self.conv_xy = nn.Conv3d(channels, channels, (1, 3, 3), stride=(1, stride_s, stride_s),
                                 padding=(0, 1, 1), bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv_xy(torch.relu(self.bn(self.conv_t(x))))


class _ConvBN(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, kernel, stride, padding=0) -> None:
        super().__init__()
        self.conv = nn.Conv3d(in_ch, out_ch, kernel, stride=stride, padding=padding, bias=False)
        self.bn = nn.BatchNorm3d(out_ch)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(x))


class Bottleneck2Plus1DPTV(nn.Module):
    """1x1x1 reduce, (2+1)D conv (strided), 1x1x1 expand, plus the shortcut.

    Args:
        in_ch: Input channels.
        inner: Width of conv a and the (2+1)D conv.
        out_ch: Output channels.
        stride_t: Temporal stride of the (2+1)D conv and the shortcut.
        stride_s: Spatial stride of the (2+1)D conv and the shortcut.
    """

    def __init__(self, in_ch: int, inner: int, out_ch: int, stride_t: int = 1,
                 stride_s: int = 1) -> None:
        super().__init__()
        self.conv_a = nn.Conv3d(in_ch, inner, 1, bias=False)
        self.bn_a = nn.BatchNorm3d(inner)
        self.conv_b = Conv2Plus1D(inner, stride_t, stride_s)
        self.bn_b = nn.BatchNorm3d(inner)
        self.conv_c = nn.Conv3d(inner, out_ch, 1, bias=False)
        self.bn_c = nn.BatchNorm3d(out_ch)
        self.shortcut = None
        if in_ch != out_ch or stride_t != 1 or stride_s != 1:
            self.shortcut = _ConvBN(in_ch, out_ch, 1, (stride_t, stride_s, stride_s))
        self.drop_path: nn.Module = nn.Identity()  # stochastic depth (see blockwise.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.bn_a(self.conv_a(x)))
        y = torch.relu(self.bn_b(self.conv_b(y)))
        y = self.drop_path(self.bn_c(self.conv_c(y)))
        return torch.relu(y + (x if self.shortcut is None else self.shortcut(x)))


class _Head(nn.Module):
    def __init__(self, in_ch: int, num_classes: int, dropout: float) -> None:
        super().__init__()
        self.dropout = nn.Dropout(dropout)
        self.proj = nn.Linear(in_ch, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.dropout(x.mean((2, 3, 4))))


class R2Plus1DPTV(StageLayersMixin, ClassifierMixin, nn.Module):
    """PyTorchVideo's R(2+1)D (see the module docstring).

    Args:
        num_classes: Output classes.
        depth: 50, 101 or 152 (PyTorchVideo's blocks per stage: 3-4-6-3, 3-4-23-3, 3-8-36-3).
        width: Stem width (PySlowFast's RESNET.WIDTH_PER_GROUP, 64); stage widths follow.
        dropout: Dropout before the classifier (PySlowFast's config and the hub: 0.5).
        in_channels: Input channels.
        drop_path: Stochastic depth of the last residual block (linear from 0 at the first).
        zero_init_final_bn: Zero each block's ``bn_c`` gamma so it starts as its shortcut.
        head_init_std: Std of the classifier's normal init.
    """

    classifier_name = "head.proj"

    def __init__(self, num_classes: int = 400, depth: int = 50, width: int = 64,
                 dropout: float = 0.5, in_channels: int = 3, zero_init_final_bn: bool = True,
                 head_init_std: float = 0.01, drop_path: float = 0.0) -> None:
        super().__init__()
        if depth not in (50, 101, 152) or width < 1:
            raise ValueError(f"R(2+1)D needs depth 50, 101 or 152 and width >= 1, got depth "
                             f"{depth}, width {width}")
        self.stem = _ConvBN(in_channels, width, (1, 7, 7), (1, 2, 2), (0, 3, 3))
        in_ch = width
        for n, (blocks, (st, ss)) in enumerate(zip(STAGE_BLOCKS[depth], _STAGE_STRIDES)):
            inner = width * 2 ** n
            stage = nn.Sequential(*[
                Bottleneck2Plus1DPTV(in_ch if j == 0 else 4 * inner, inner, 4 * inner,
                                     st if j == 0 else 1, ss if j == 0 else 1)
                for j in range(blocks)])
            self.add_module(f"res{n + 2}", stage)
            in_ch = 4 * inner
        self.head = _Head(in_ch, num_classes, dropout)
        init_3d_weights(self, zero_init_final_bn=False, head_init_std=head_init_std)
        if zero_init_final_bn:
            for m in self.modules():
                if isinstance(m, Bottleneck2Plus1DPTV):
                    nn.init.zeros_(m.bn_c.weight)
        self.set_drop_path_rate(drop_path)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The res5 feature map ``(B, C, T, H', W')``."""
        x = torch.relu(self.stem(x))
        return self.res5(self.res4(self.res3(self.res2(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        return self.head(self.forward_features(x))


# Params at 400 classes equal PyTorchVideo's hub r2plus1d_r50 (28,107,600); gflops: multiply-adds
# of one 16x224x224 view, counted by torch.utils.flop_counter (recounted in the tests); top-1:
# PyTorchVideo's model zoo (R(2+1)D R50 16x4, Kinetics-400).
register_model(
    "r2plus1d_16x4_resnet50", R2Plus1DPTV,
    video_facts(16, 4, 224, KINETICS_MEAN, KINETICS_STD, params=28_107_600, gflops=57.53,
                published_top1=76.01),
    """R(2+1)D-50 in PyTorchVideo's layout (hub ``r2plus1d_r50``, PySlowFast's
    ``R2PLUS1D_16x4_R50`` config): 16 frames at stride 4, 224x224.

    Args:
        num_classes: Output classes.
        **kwargs: :class:`R2Plus1DPTV` arguments (``width``, ``depth``, ``dropout``, ...).
    """,
    depth=50)
