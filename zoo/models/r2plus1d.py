"""R(2+1)D ResNets (Tran et al., CVPR 2018): every 3x3x3 conv factorised into a 1x3x3 spatial conv
and a 3x1x1 temporal conv with a BN + ReLU between them.

The module tree and state-dict keys equal torchvision's ``VideoResNet`` built with
``Conv2Plus1D`` (``torchvision.models.video.r2plus1d_18``), so a torchvision R(2+1)D-18 file loads
into ``r2plus1d_resnet18`` unchanged (``--from torchvision`` only checks it)::

    stem.{0,3}.weight                    1x7x7 conv (3 -> 45), then 3x1x1 conv (45 -> 64)
    stem.{1,4}.*                         their BNs
    layer{n}.{j}.conv{1,2}.0.{0,3}.weight  spatial 1x3x3, temporal 3x1x1 convs of the (2+1)D conv
    layer{n}.{j}.conv{1,2}.0.1.*         the BN between them
    layer{n}.{j}.conv{1,2}.1.*           the BN after the block's conv
    layer{n}.0.downsample.{0,1}          1x1x1 conv (stride 2 in time and space) + BN
    fc.{weight,bias}

Each (2+1)D conv's middle width is ``in * out * 27 // (in * 9 + 3 * out)`` (computed once per
block from its input width, as torchvision does), so it has about the parameters of the 3x3x3
conv it replaces. Stages 2-4 halve time as well as space.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from .blocks3d import init_3d_weights
from .blockwise import StageLayersMixin
from .classifier import ClassifierMixin
from .facts import video_facts
from .registry import register_model

__all__ = ["R2Plus1D"]

# torchvision's Kinetics-400 video weights normalise with these.
_TV_VIDEO_MEAN = [0.43216, 0.394666, 0.37645]
_TV_VIDEO_STD = [0.22803, 0.22145, 0.216989]


def _conv2plus1d(in_ch: int, out_ch: int, mid: int, stride: int = 1) -> nn.Sequential:
    """1x3x3 spatial conv (stride in space), BN, ReLU, 3x1x1 temporal conv (stride in time)."""
    return nn.Sequential(
        nn.Conv3d(in_ch, mid, (1, 3, 3), stride=(1, stride, stride), padding=(0, 1, 1),
                  bias=False),
        nn.BatchNorm3d(mid),
        nn.ReLU(inplace=True),
        nn.Conv3d(mid, out_ch, (3, 1, 1), stride=(stride, 1, 1), padding=(1, 0, 0), bias=False),
    )


class BasicBlock2Plus1D(nn.Module):
    """Two (2+1)D convs with BN, ReLU between and after, and a residual shortcut.

    Args:
        in_ch: Input channels.
        out_ch: Output channels.
        stride: Stride in time and space of the first conv (and the shortcut).
    """

    def __init__(self, in_ch: int, out_ch: int, stride: int = 1) -> None:
        super().__init__()
        mid = (in_ch * out_ch * 27) // (in_ch * 9 + 3 * out_ch)
        self.conv1 = nn.Sequential(_conv2plus1d(in_ch, out_ch, mid, stride),
                                   nn.BatchNorm3d(out_ch), nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(_conv2plus1d(out_ch, out_ch, mid), nn.BatchNorm3d(out_ch))
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv3d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm3d(out_ch))
        self.drop_path: nn.Module = nn.Identity()  # stochastic depth (see blockwise.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(self.drop_path(self.conv2(self.conv1(x))) + shortcut)


class Bottleneck2Plus1D(nn.Module):
    """1x1x1 reduce, a (2+1)D conv (strided in time and space), 1x1x1 expand (4x), as gluoncv's
    ``r2plus1d_v1_resnet50`` builds it; keys laid out like torchvision's video ``Bottleneck``.

    The (2+1)D conv's middle width is computed from the block's *input* width and the inner
    width (gluoncv's formula), not from the inner width twice.

    Args:
        in_ch: Input channels.
        width: Inner width (output is ``4 * width``).
        stride: Stride in time and space of the (2+1)D conv (and of the shortcut).
    """

    expansion = 4

    def __init__(self, in_ch: int, width: int, stride: int = 1) -> None:
        super().__init__()
        out_ch = width * 4
        mid = (in_ch * width * 27) // (in_ch * 9 + 3 * width)
        self.conv1 = nn.Sequential(nn.Conv3d(in_ch, width, 1, bias=False), nn.BatchNorm3d(width),
                                   nn.ReLU(inplace=True))
        self.conv2 = nn.Sequential(_conv2plus1d(width, width, mid, stride), nn.BatchNorm3d(width),
                                   nn.ReLU(inplace=True))
        self.conv3 = nn.Sequential(nn.Conv3d(width, out_ch, 1, bias=False),
                                   nn.BatchNorm3d(out_ch))
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv3d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm3d(out_ch))
        self.drop_path: nn.Module = nn.Identity()  # stochastic depth (see blockwise.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        return self.relu(self.drop_path(self.conv3(self.conv2(self.conv1(x)))) + shortcut)


class R2Plus1D(StageLayersMixin, ClassifierMixin, nn.Module):
    """R(2+1)D ResNet with torchvision's key names; its classifier is ``fc``.

    Args:
        layers: Blocks in each of the four stages ((2, 2, 2, 2) = 18, (3, 4, 6, 3) = 34 or 50).
        num_classes: Output classes.
        width: Width of stage 1 (64 = the published nets; stages 2-4 use 2x, 4x, 8x). The stem's
            middle width scales with it (45 at 64).
        dropout: Dropout before ``fc`` (0 = none; no state-dict keys either way).
        in_channels: Input channels (3 for RGB).
        drop_path: Stochastic depth of the last residual block (linear from 0 at the first).
        bottleneck: Use :class:`Bottleneck2Plus1D` blocks (output 4x wider) instead of basic
            blocks (gluoncv's R(2+1)D-50).
    """

    head_init_std = 0.01  # torchvision's; reset_classifier uses it too

    def __init__(self, layers: Sequence[int], num_classes: int = 400, width: int = 64,
                 dropout: float = 0.0, in_channels: int = 3, bottleneck: bool = False,
                 drop_path: float = 0.0) -> None:
        super().__init__()
        if len(layers) != 4 or width < 1:
            raise ValueError(f"need 4 stage depths and width >= 1, got {list(layers)}, {width}")
        stem_mid = max(1, 45 * width // 64)
        self.stem = nn.Sequential(
            nn.Conv3d(in_channels, stem_mid, (1, 7, 7), stride=(1, 2, 2), padding=(0, 3, 3),
                      bias=False),
            nn.BatchNorm3d(stem_mid),
            nn.ReLU(inplace=True),
            nn.Conv3d(stem_mid, width, (3, 1, 1), padding=(1, 0, 0), bias=False),
            nn.BatchNorm3d(width),
            nn.ReLU(inplace=True),
        )
        in_ch = width
        block = Bottleneck2Plus1D if bottleneck else BasicBlock2Plus1D
        expansion = 4 if bottleneck else 1
        for i, n in enumerate(layers):
            inner, stride = width * 2**i, 1 if i == 0 else 2
            blocks = [block(in_ch, inner, stride)]
            blocks += [block(inner * expansion, inner) for _ in range(1, n)]
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
            in_ch = inner * expansion
        self.avgpool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(in_ch, num_classes)
        # torchvision's VideoResNet init (MSRA convs, unit BN, N(0, 0.01) head), which is
        # PySlowFast's without the zeroed last BN: a fresh zoo net starts like theirs.
        init_3d_weights(self, zero_init_final_bn=False, head_init_std=self.head_init_std)
        self.set_drop_path_rate(drop_path)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        x = self.layer4(self.layer3(self.layer2(self.layer1(self.stem(x)))))
        return self.fc(self.dropout(self.avgpool(x).flatten(1)))


def _variant(name: str, layers: Sequence[int], params: int, gflops: float,
             bottleneck: bool = False) -> None:
    """Register the builder ``name``: an :class:`R2Plus1D` with ``layers``."""
    kind = "bottleneck" if bottleneck else "basic-block"
    doc = f"""R(2+1)D with {kind} stages {tuple(layers)} and torchvision's keys.

    Args:
        num_classes: Output classes.
        **kwargs: :class:`R2Plus1D` arguments (``width``, ``dropout``, ``in_channels``).
    """
    # torchvision's recipe: 16 frames at 15 fps (every 2nd frame of 30 fps video), 112x112.
    facts = video_facts(16, 2, 112, _TV_VIDEO_MEAN, _TV_VIDEO_STD, params=params, gflops=gflops)
    register_model(name, R2Plus1D, facts, doc, layers=layers, bottleneck=bottleneck)


# Params at 400 classes (resnet18's equals torchvision's r2plus1d_18: checked in tests); gflops:
# multiply-adds of one 16x112x112 view counted by torch.utils.flop_counter (recounted in tests).
_variant("r2plus1d_resnet18", (2, 2, 2, 2), 31_505_325, 40.5)
_variant("r2plus1d_resnet34", (3, 4, 6, 3), 61_831_661, 75.2)
# Params equal gluoncv's r2plus1d_v1_resnet{50,101,152} (counted from its code).
_variant("r2plus1d_resnet50", (3, 4, 6, 3), 53_949_691, 65.2, bottleneck=True)
_variant("r2plus1d_resnet101", (3, 4, 23, 3), 99_913_475, 101.2, bottleneck=True)
_variant("r2plus1d_resnet152", (3, 8, 36, 3), 137_770_491, 145.6, bottleneck=True)
