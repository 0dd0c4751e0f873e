"""2D ResNet family (resnet18 ... resnet152), usable as an image model or a frame-level video model.

The module tree and ``state_dict`` keys/shapes equal torchvision's ResNet (``conv1``, ``bn1``,
``layer{1..4}.{j}.conv{1,2,3}`` / ``bn{1,2,3}`` / ``downsample.{0,1}``, ``fc``), so a torchvision
weight file loads with ``load_state_dict(..., strict=True)`` and no key mapping. Like torchvision
(ResNet v1.5), a bottleneck puts its spatial stride on the 3x3 conv.

``forward`` takes images ``(B, C, H, W)`` or clips ``(B, C, T, H, W)``. A clip is classified frame
by frame and the logits are averaged over T, so with T = 1 it is a single-frame model.
"""

from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Type, Union

import torch
import torch.nn as nn

from .classifier import ClassifierMixin
from .facts import IMAGENET_MEAN, IMAGENET_STD, ModelFacts
from .registry import register_model

__all__ = ["BasicBlock", "Bottleneck", "ResNet"]


def _conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """Two 3x3 convs with an identity (or 1x1 projection) shortcut; used by resnet18/34.

    Args:
        in_ch: Input channels.
        width: Channels of both convs (the block's output has ``width * expansion`` channels).
        stride: Spatial stride of the first conv.
        downsample: Projection applied to the shortcut when shape changes, else ``None``.
    """

    expansion = 1

    def __init__(
        self, in_ch: int, width: int, stride: int = 1, downsample: Optional[nn.Module] = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(in_ch, width, stride)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(width, width)
        self.bn2 = nn.BatchNorm2d(width)
        self.downsample = downsample

    def last_bn(self) -> nn.BatchNorm2d:
        """The BN whose gamma ``zero_init_residual`` zeroes."""
        return self.bn2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + shortcut)


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (strided), 1x1 expand x4; used by resnet50/101/152.

    Args:
        in_ch: Input channels.
        width: Inner channels (the block's output has ``width * expansion`` channels).
        stride: Spatial stride, applied on the 3x3 conv as torchvision does.
        downsample: Projection applied to the shortcut when shape changes, else ``None``.
    """

    expansion = 4

    def __init__(
        self, in_ch: int, width: int, stride: int = 1, downsample: Optional[nn.Module] = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv1x1(in_ch, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, width * self.expansion)
        self.bn3 = nn.BatchNorm2d(width * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def last_bn(self) -> nn.BatchNorm2d:
        """The BN whose gamma ``zero_init_residual`` zeroes."""
        return self.bn3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shortcut = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + shortcut)


class ResNet(ClassifierMixin, nn.Module):
    """A 2D ResNet whose parameter names equal torchvision's; its classifier is ``fc``.

    Args:
        block: ``BasicBlock`` or ``Bottleneck``.
        layers: Number of blocks in each of the four stages.
        num_classes: Size of the classification head.
        base_width: Width of the stem and of stage 1; stages 2-4 use 2x, 4x, 8x. 64 gives the
            standard nets; smaller values give cheap variants for tests and CPU runs.
        dropout: Dropout probability before ``fc`` (0 = none). Dropout has no parameters, so the
            state_dict keys are the same either way.
        zero_init_residual: Start each block's last BN gamma at 0, so every residual branch
            starts as identity (helps large-batch training; off by default as in torchvision).
        in_channels: Input channels (3 for RGB).
    """

    def __init__(
        self,
        block: Type[Union[BasicBlock, Bottleneck]],
        layers: Sequence[int],
        num_classes: int = 1000,
        base_width: int = 64,
        dropout: float = 0.0,
        zero_init_residual: bool = False,
        in_channels: int = 3,
    ) -> None:
        super().__init__()
        if len(layers) != 4:
            raise ValueError(f"layers must list 4 stage depths, got {list(layers)}")
        if base_width < 1 or num_classes < 1:
            raise ValueError(f"base_width and num_classes must be >= 1, got {base_width}, "
                             f"{num_classes}")
        self._in_ch = base_width
        self.conv1 = nn.Conv2d(in_channels, base_width, kernel_size=7, stride=2, padding=3,
                               bias=False)
        self.bn1 = nn.BatchNorm2d(base_width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, base_width, layers[0], stride=1)
        self.layer2 = self._make_layer(block, base_width * 2, layers[1], stride=2)
        self.layer3 = self._make_layer(block, base_width * 4, layers[2], stride=2)
        self.layer4 = self._make_layer(block, base_width * 8, layers[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.fc = nn.Linear(base_width * 8 * block.expansion, num_classes)
        self._init_weights(zero_init_residual)

    def _make_layer(
        self, block: Type[Union[BasicBlock, Bottleneck]], width: int, blocks: int, stride: int
    ) -> nn.Sequential:
        out_ch = width * block.expansion
        downsample = None
        if stride != 1 or self._in_ch != out_ch:
            downsample = nn.Sequential(
                _conv1x1(self._in_ch, out_ch, stride), nn.BatchNorm2d(out_ch)
            )
        layers: List[nn.Module] = [block(self._in_ch, width, stride, downsample)]
        self._in_ch = out_ch
        layers += [block(out_ch, width) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def _init_weights(self, zero_init_residual: bool) -> None:
        # Same scheme as torchvision, so a randomly initialised zoo net trains like theirs.
        # fc keeps PyTorch's default Linear init, as torchvision does.
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, (BasicBlock, Bottleneck)):
                    nn.init.zeros_(m.last_bn().weight)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """Pooled features ``(N, C)`` of a batch of images ``(N, C_in, H, W)``."""
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of images ``(B, C, H, W)`` or clips ``(B, C, T, H, W)``."""
        if x.dim() == 4:
            return self.fc(self.dropout(self.forward_features(x)))
        if x.dim() != 5:
            raise ValueError(
                f"expected (B, C, H, W) or (B, C, T, H, W) input, got {tuple(x.shape)}"
            )
        b, c, t, h, w = x.shape
        # Fold time into the batch: every frame is classified on its own, then logits averaged.
        frames = x.transpose(1, 2).reshape(b * t, c, h, w)
        logits = self.fc(self.dropout(self.forward_features(frames)))
        return logits.view(b, t, -1).mean(dim=1)


def _variant(
    name: str,
    block: Type[Union[BasicBlock, Bottleneck]],
    layers: Sequence[int],
    params: int,
    gflops: float,
) -> Callable[..., nn.Module]:
    """Register the builder ``name``: a :class:`ResNet` of ``block`` with ``layers``."""
    facts = ModelFacts(task="image", input_frames=1, sampling_stride=1, crop_size=224,
                       mean=IMAGENET_MEAN, std=IMAGENET_STD, params=params, gflops=gflops)
    doc = f"""{name}: {block.__name__} stages {tuple(layers)}, torchvision keys.

    Args:
        num_classes: Size of the classification head (default 1000).
        **kwargs: :class:`ResNet` arguments: ``base_width`` (64 = the standard net; all stage
            widths scale with it), ``dropout`` before ``fc`` (no effect on state_dict keys),
            ``zero_init_residual``, ``in_channels``.

    Returns:
        A :class:`ResNet` with {params:,} parameters at 1000 classes and base_width 64.
    """
    return register_model(name, ResNet, facts, doc, block=block, layers=layers)


# Parameter counts at 1000 classes equal torchvision's (checked in tests/test_models.py); gflops:
# multiply-adds of one 224x224 image counted by torch.utils.flop_counter (recounted in tests).
resnet18 = _variant("resnet18", BasicBlock, (2, 2, 2, 2), 11_689_512, 1.81)
resnet34 = _variant("resnet34", BasicBlock, (3, 4, 6, 3), 21_797_672, 3.66)
resnet50 = _variant("resnet50", Bottleneck, (3, 4, 6, 3), 25_557_032, 4.09)
resnet101 = _variant("resnet101", Bottleneck, (3, 4, 23, 3), 44_549_160, 7.80)
resnet152 = _variant("resnet152", Bottleneck, (3, 8, 36, 3), 60_192_808, 11.51)
