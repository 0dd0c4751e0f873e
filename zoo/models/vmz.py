"""ResNet-152s from Facebook's VMZ (caffe2 Video Model Zoo), as gluoncv ports them.

- ``ircsn_resnet152``: interaction-reduced channel-separated network (Tran et al., ICCV 2019).
  Each bottleneck's 3x3x3 conv is depthwise (``groups = width``); the 1x1x1 convs carry all
  channel interactions. gluoncv's ``ircsn_v2_resnet152_f32s2``.
- ``r2plus1d_v2_resnet152``: R(2+1)D bottlenecks (Ghadiyaram et al., CVPR 2019): the 3x3x3 conv
  is a 1x3x3 conv to a middle width, BN, ReLU, then a 3x1x1 conv. gluoncv's
  ``r2plus1d_v2_resnet152``.

Both share the skeleton: a stem, four stages of (3, 8, 36, 3) bottlenecks (expansion 4) whose
first block always has a 1x1x1 projection shortcut, stages 2-4 halving time and space, a global
average pool and a linear head without dropout. BatchNorm eps is 1e-3 (caffe2's), as in gluoncv.
Module names follow gluoncv's (``conv1``, ``bn1``, ``layer{n}.{j}.conv{k}``, ``down_sample``,
``out_fc``), so its checkpoints' keys are the same.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn as nn

from .blocks3d import init_3d_weights
from .blockwise import StageLayersMixin
from .classifier import ClassifierMixin
from .facts import IMAGENET_MEAN, IMAGENET_STD, video_facts
from .registry import register_model

__all__ = ["VMZResNet"]

_EPS = 1e-3


def _bn(ch: int) -> nn.BatchNorm3d:
    return nn.BatchNorm3d(ch, eps=_EPS)


class IrCSNBottleneck(nn.Module):
    """1x1x1 reduce, depthwise 3x3x3 (strided in time and space), 1x1x1 expand; BN after each.

    Args:
        in_ch: Input channels.
        width: Inner width (output is ``4 * width``).
        stride: Stride in time and space of the depthwise conv (and of the shortcut).
        shortcut: Give the block a 1x1x1 projection shortcut.
    """

    def __init__(self, in_ch: int, width: int, stride: int = 1, shortcut: bool = False) -> None:
        super().__init__()
        self.conv1 = nn.Conv3d(in_ch, width, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv3 = nn.Conv3d(width, width, 3, stride=stride, padding=1, groups=width,
                               bias=False)
        self.bn3 = _bn(width)
        self.conv4 = nn.Conv3d(width, width * 4, 1, bias=False)
        self.bn4 = _bn(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.down_sample = _projection(in_ch, width * 4, stride) if shortcut else None
        self.drop_path: nn.Module = nn.Identity()  # stochastic depth (see blockwise.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down_sample is None else self.down_sample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn3(self.conv3(out)))
        return self.relu(self.drop_path(self.bn4(self.conv4(out))) + identity)


class R2Plus1DBottleneck(nn.Module):
    """1x1x1 reduce, 1x3x3 conv to a middle width, 3x1x1 conv, 1x1x1 expand; BN after each.

    The middle width ``w * w * 27 // (w * 9 + 3 * w)`` gives the pair about the parameters of the
    3x3x3 conv it replaces (144, 288, 576, 1152 for the four stages).

    Args:
        in_ch: Input channels.
        width: Inner width ``w`` (output is ``4 * w``).
        stride: Spatial stride of the 1x3x3 conv and temporal stride of the 3x1x1 conv.
        shortcut: Give the block a 1x1x1 projection shortcut.
    """

    def __init__(self, in_ch: int, width: int, stride: int = 1, shortcut: bool = False) -> None:
        super().__init__()
        mid = width * width * 27 // (width * 9 + 3 * width)
        self.conv1 = nn.Conv3d(in_ch, width, 1, bias=False)
        self.bn1 = _bn(width)
        self.conv2_middle = nn.Conv3d(width, mid, (1, 3, 3), stride=(1, stride, stride),
                                      padding=(0, 1, 1), bias=False)
        self.bn2_middle = _bn(mid)
        self.conv2 = nn.Conv3d(mid, width, (3, 1, 1), stride=(stride, 1, 1), padding=(1, 0, 0),
                               bias=False)
        self.bn2 = _bn(width)
        self.conv3 = nn.Conv3d(width, width * 4, 1, bias=False)
        self.bn3 = _bn(width * 4)
        self.relu = nn.ReLU(inplace=True)
        self.down_sample = _projection(in_ch, width * 4, stride) if shortcut else None
        self.drop_path: nn.Module = nn.Identity()  # stochastic depth (see blockwise.py)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.down_sample is None else self.down_sample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2_middle(self.conv2_middle(out)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.drop_path(self.bn3(self.conv3(out))) + identity)


def _projection(in_ch: int, out_ch: int, stride: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv3d(in_ch, out_ch, 1, stride=stride, bias=False), _bn(out_ch))


class VMZResNet(StageLayersMixin, ClassifierMixin, nn.Module):
    """The shared skeleton of ir-CSN and R(2+1)D v2 (see the module docstring); its classifier
    is ``out_fc``.

    Args:
        kind: ``"ircsn"`` (3x7x7 stem conv + 1x3x3 max-pool) or ``"r2plus1d"`` (1x7x7 conv to 45
            channels, 3x1x1 conv to the stem width; no pool).
        layers: Blocks per stage ((3, 8, 36, 3) for the published 152-layer nets).
        num_classes: Output classes.
        width: Stem width and stage-1 inner width (64 published; stages 2-4 use 2x, 4x, 8x).
        dropout: Dropout before ``out_fc`` (0 in gluoncv).
        in_channels: Input channels (3 for RGB).
        drop_path: Stochastic depth of the last residual block (linear from 0 at the first).
    """

    classifier_name = "out_fc"
    head_init_std = 0.01

    def __init__(self, kind: str, layers: Sequence[int] = (3, 8, 36, 3), num_classes: int = 400,
                 width: int = 64, dropout: float = 0.0, in_channels: int = 3,
                 drop_path: float = 0.0) -> None:
        super().__init__()
        if kind not in ("ircsn", "r2plus1d") or len(layers) != 4 or width < 1:
            raise ValueError(f"need kind 'ircsn' or 'r2plus1d', 4 stage depths and width >= 1, "
                             f"got {kind!r}, {list(layers)}, {width}")
        self.kind = kind
        if kind == "ircsn":
            self.conv1 = nn.Conv3d(in_channels, width, (3, 7, 7), stride=(1, 2, 2),
                                   padding=(1, 3, 3), bias=False)
            self.bn1 = _bn(width)
            self.maxpool = nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))
            block = IrCSNBottleneck
        else:
            stem_mid = max(1, 45 * width // 64)
            self.conv1_middle = nn.Conv3d(in_channels, stem_mid, (1, 7, 7), stride=(1, 2, 2),
                                          padding=(0, 3, 3), bias=False)
            self.bn1_middle = _bn(stem_mid)
            self.conv1 = nn.Conv3d(stem_mid, width, (3, 1, 1), padding=(1, 0, 0), bias=False)
            self.bn1 = _bn(width)
            block = R2Plus1DBottleneck
        self.relu = nn.ReLU(inplace=True)
        in_ch = width
        for i, n in enumerate(layers):
            inner, stride = width * 2**i, 1 if i == 0 else 2
            blocks = [block(in_ch, inner, stride, shortcut=True)]
            blocks += [block(inner * 4, inner) for _ in range(1, n)]
            self.add_module(f"layer{i + 1}", nn.Sequential(*blocks))
            in_ch = inner * 4
        self.avgpool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.out_fc = nn.Linear(in_ch, num_classes)
        init_3d_weights(self, zero_init_final_bn=False, head_init_std=self.head_init_std)
        self.set_drop_path_rate(drop_path)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Feature map ``(B, C, T', H', W')`` after layer4."""
        if self.kind == "ircsn":
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        else:
            x = self.relu(self.bn1_middle(self.conv1_middle(x)))
            x = self.relu(self.bn1(self.conv1(x)))
        return self.layer4(self.layer3(self.layer2(self.layer1(x))))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        return self.out_fc(self.dropout(self.avgpool(self.forward_features(x)).flatten(1)))


_DOC = """{summary}

    Args:
        num_classes: Output classes.
        **kwargs: :class:`VMZResNet` arguments (``layers``, ``width``, ``dropout``, ...).
    """

# Params at 400 classes equal gluoncv's ResNet_IRCSNv2 / ResNet_R2plus1Dv2 (counted from its code);
# gflops: multiply-adds per view at the crop (torch.utils.flop_counter; recounted in tests).
# gluoncv's video transforms normalise with ImageNet's mean / std.
register_model(
    "ircsn_resnet152", VMZResNet,
    video_facts(32, 2, 224, IMAGENET_MEAN, IMAGENET_STD, params=29_703_568, gflops=74.0),
    _DOC.format(summary="ir-CSN ResNet-152 (gluoncv's ircsn_v2_resnet152_f32s2): 32 frames at "
                "stride 2."),
    kind="ircsn")
register_model(
    "r2plus1d_v2_resnet152", VMZResNet,
    video_facts(32, 2, 112, IMAGENET_MEAN, IMAGENET_STD, params=118_226_785, gflops=252.0),
    _DOC.format(summary="R(2+1)D v2 ResNet-152 with bottlenecks (gluoncv's "
                "r2plus1d_v2_resnet152): 32 frames at stride 2, 112x112 crops."),
    kind="r2plus1d")
