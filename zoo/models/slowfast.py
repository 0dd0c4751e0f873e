"""SlowFast networks (Feichtenhofer et al., ICCV 2019), layer for layer as in PySlowFast.

A slow pathway sees ``T / alpha`` frames with wide channels; a fast pathway sees all ``T`` frames
with ``1 / beta_inv`` of the channels. After the stem and after res2, res3 and res4 a lateral
connection (conv ``(k, 1, 1)`` with temporal stride ``alpha`` + BN + ReLU) maps fast features onto
the slow time axis; they are concatenated after the slow features. The head pools each pathway
globally and classifies the concatenation (slow columns first, then fast).

``forward`` takes the fast clip ``(B, C, T, H, W)`` (the slow clip is ``T // alpha`` frames picked
inside, like PySlowFast's PackPathway) or a ``[slow, fast]`` list, and always returns logits.

State-dict key scheme (``{p}`` is ``slow`` or ``fast``; ``{n}`` is 2..5; ``{j}`` is a block index)::

    {p}_stem.conv.weight                 Conv3d (kt, 7, 7), stride (1, 2, 2), no bias
    {p}_stem.bn.{weight,bias,running_mean,running_var,num_batches_tracked}
    fuse_{stem,res2,res3,res4}.conv.weight   fast -> slow lateral, Conv3d (k, 1, 1), no bias
    fuse_{stem,res2,res3,res4}.bn.*
    {p}_res{n}.{j}.conv_a.weight         1x1x1 (temporal kernel kt x 1 x 1), no bias
    {p}_res{n}.{j}.bn_a.*
    {p}_res{n}.{j}.conv_b.weight         1x3x3, carries the spatial stride
    {p}_res{n}.{j}.bn_b.*
    {p}_res{n}.{j}.conv_c.weight         1x1x1
    {p}_res{n}.{j}.bn_c.*
    {p}_res{n}.0.shortcut.conv.weight    projection shortcut, block 0 only
    {p}_res{n}.0.shortcut.bn.*
    head.proj.{weight,bias}              Linear(slow_out + fast_out -> classes), slow columns first

PySlowFast names map one to one: ``s1.pathway0_stem`` -> ``slow_stem``, ``s1_fuse.conv_f2s`` ->
``fuse_stem.conv``, ``s{n}_fuse`` -> ``fuse_res{n+1}``, ``s{n}.pathway1_res{j}.branch2.a`` ->
``fast_res{n}.{j}.conv_a`` (``a_bn`` -> ``bn_a``), ``branch1`` / ``branch1_bn`` ->
``shortcut.conv`` / ``shortcut.bn``, ``head.projection`` -> ``head.proj``. The R50 nets have 662
state-dict entries, the same count as a PySlowFast checkpoint.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from .build import MODEL_REGISTRY

__all__ = ["SlowFast", "STAGE_BLOCKS"]

# Bottleneck blocks per stage (res2..res5) for each depth, as in PySlowFast.
STAGE_BLOCKS: Dict[int, Tuple[int, int, int, int]] = {
    18: (2, 2, 2, 2),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}
# Temporal kernel (slow, fast) of the stem and of conv a in res2..res5. The slow pathway has no
# temporal conv before res4: the paper found early temporal kernels hurt at low frame rates.
_STEM_KT = (1, 5)
_STAGE_KT = ((1, 3), (1, 3), (3, 3), (3, 3))

_KINETICS_MEAN = [0.45, 0.45, 0.45]
_KINETICS_STD = [0.225, 0.225, 0.225]

Clip = Union[torch.Tensor, Sequence[torch.Tensor]]


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
    """

    def __init__(self, in_ch: int, out_ch: int, kt: int) -> None:
        super().__init__(in_ch, out_ch, (kt, 7, 7), (1, 2, 2), (kt // 2, 3, 3), relu=True)
        self.pool = nn.MaxPool3d((1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(super().forward(x))


class Bottleneck(nn.Module):
    """Bottleneck block: a (kt x 1 x 1) -> b (1 x 3 x 3, strided) -> c (1 x 1 x 1), plus shortcut.

    Args:
        in_ch: Input channels.
        inner: Channels of convs a and b.
        out_ch: Output channels.
        kt: Temporal kernel size of conv a.
        stride: Spatial stride of conv b (and of the shortcut).
    """

    def __init__(self, in_ch: int, inner: int, out_ch: int, kt: int, stride: int) -> None:
        super().__init__()
        self.conv_a = nn.Conv3d(in_ch, inner, (kt, 1, 1), padding=(kt // 2, 0, 0), bias=False)
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.shortcut is None else self.shortcut(x)
        out = self.relu(self.bn_a(self.conv_a(x)))
        out = self.relu(self.bn_b(self.conv_b(out)))
        out = self.bn_c(self.conv_c(out))
        return self.relu(out + identity)


def _stage(in_ch: int, inner: int, out_ch: int, blocks: int, kt: int, stride: int) -> nn.Sequential:
    """``blocks`` bottlenecks; only block 0 changes width / stride (and so has a shortcut)."""
    layers = [Bottleneck(in_ch, inner, out_ch, kt, stride)]
    layers += [Bottleneck(out_ch, inner, out_ch, kt, 1) for _ in range(1, blocks)]
    return nn.Sequential(*layers)


class Fuse(ConvBN):
    """Fast -> slow lateral: Conv3d (k, 1, 1) with temporal stride alpha, BN, ReLU.

    Args:
        fast_ch: Channels of the fast features.
        ratio: Output channels are ``ratio * fast_ch``.
        kernel: Temporal kernel size k.
        alpha: Frame-rate ratio between the pathways (the temporal stride).
    """

    def __init__(self, fast_ch: int, ratio: int, kernel: int, alpha: int) -> None:
        super().__init__(fast_ch, fast_ch * ratio, (kernel, 1, 1), (alpha, 1, 1),
                         (kernel // 2, 0, 0), relu=True)

    def fuse(self, slow: torch.Tensor, fast: torch.Tensor) -> torch.Tensor:
        """``slow`` with the lateral of ``fast`` concatenated after its channels."""
        return torch.cat([slow, self(fast)], dim=1)


class Head(nn.Module):
    """Global average pool per pathway, concat (slow, fast), dropout, linear projection.

    Args:
        in_ch: Channels of the slow and the fast features.
        num_classes: Output classes.
        dropout: Dropout probability before the projection.
    """

    def __init__(self, in_ch: Tuple[int, int], num_classes: int, dropout: float) -> None:
        super().__init__()
        self.pool = nn.AdaptiveAvgPool3d(1)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.proj = nn.Linear(sum(in_ch), num_classes)

    def forward(self, slow: torch.Tensor, fast: torch.Tensor) -> torch.Tensor:
        x = torch.cat([self.pool(slow).flatten(1), self.pool(fast).flatten(1)], dim=1)
        return self.proj(self.dropout(x))


class SlowFast(nn.Module):
    """SlowFast network with ResNet bottleneck pathways.

    Args:
        num_classes: Output classes.
        depth: 18, 50, 101 or 152; picks the bottleneck blocks per stage from ``STAGE_BLOCKS``.
        alpha: Frame-rate ratio: the slow pathway sees ``T // alpha`` frames.
        beta_inv: Channel ratio: fast widths are slow widths divided by this.
        fusion_conv_channel_ratio: A lateral outputs this many times the fast channels.
        fusion_kernel: Temporal kernel of the lateral convs.
        width: Slow stem width (64 for the published nets). Slow stage inner widths are
            ``width * (1, 2, 4, 8)`` and stage outputs four times that.
        dropout: Dropout before the head projection.
        in_channels: Input channels (3 for RGB).
        zero_init_final_bn: Start each bottleneck's ``bn_c`` gamma at 0 so every block starts as
            identity; PySlowFast's Kinetics configs do this (``ZERO_INIT_FINAL_BN: True``).
        head_init_std: Std of the normal init of the head projection.
    """

    def __init__(
        self,
        num_classes: int = 400,
        depth: int = 50,
        alpha: int = 8,
        beta_inv: int = 8,
        fusion_conv_channel_ratio: int = 2,
        fusion_kernel: int = 5,
        width: int = 64,
        dropout: float = 0.5,
        in_channels: int = 3,
        zero_init_final_bn: bool = True,
        head_init_std: float = 0.01,
    ) -> None:
        super().__init__()
        if depth not in STAGE_BLOCKS:
            raise ValueError(f"depth must be one of {sorted(STAGE_BLOCKS)}, got {depth}")
        if alpha < 1 or beta_inv < 1 or fusion_conv_channel_ratio < 1 or fusion_kernel < 1:
            raise ValueError("alpha, beta_inv, fusion_conv_channel_ratio and fusion_kernel must "
                             f"be >= 1, got {alpha}, {beta_inv}, {fusion_conv_channel_ratio}, "
                             f"{fusion_kernel}")
        if width < beta_inv or width % beta_inv:
            raise ValueError(f"width ({width}) must be a positive multiple of beta_inv "
                             f"({beta_inv}) so the fast pathway has width // beta_inv channels")
        self.alpha = alpha
        ratio = fusion_conv_channel_ratio
        slow_w, fast_w = width, width // beta_inv

        self.slow_stem = Stem(in_channels, slow_w, _STEM_KT[0])
        self.fast_stem = Stem(in_channels, fast_w, _STEM_KT[1])
        self.fuse_stem = Fuse(fast_w, ratio, fusion_kernel, alpha)
        slow_in, fast_in = slow_w + fast_w * ratio, fast_w

        blocks = STAGE_BLOCKS[depth]
        for i, (n, (kt_slow, kt_fast)) in enumerate(zip(blocks, _STAGE_KT)):
            name, stride, mult = f"res{i + 2}", 1 if i == 0 else 2, 2**i
            slow_inner, fast_inner = slow_w * mult, fast_w * mult
            slow_out, fast_out = slow_inner * 4, fast_inner * 4
            self.add_module(f"slow_{name}",
                            _stage(slow_in, slow_inner, slow_out, n, kt_slow, stride))
            self.add_module(f"fast_{name}",
                            _stage(fast_in, fast_inner, fast_out, n, kt_fast, stride))
            slow_in, fast_in = slow_out, fast_out
            if i < 3:  # laterals after res2..res4; res5 feeds the head directly
                self.add_module(f"fuse_{name}", Fuse(fast_out, ratio, fusion_kernel, alpha))
                slow_in += fast_out * ratio

        self.head = Head((slow_in, fast_in), num_classes, dropout)
        self._init_weights(zero_init_final_bn, head_init_std)

    def _init_weights(self, zero_init_final_bn: bool, head_init_std: float) -> None:
        # PySlowFast's init: MSRA fill for convs, unit BN, small normal head.
        for m in self.modules():
            if isinstance(m, nn.Conv3d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm3d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, std=head_init_std)
                nn.init.zeros_(m.bias)
        if zero_init_final_bn:
            for m in self.modules():
                if isinstance(m, Bottleneck):
                    nn.init.zeros_(m.bn_c.weight)

    def pack_pathways(self, clip: torch.Tensor) -> List[torch.Tensor]:
        """Split a fast clip ``(B, C, T, H, W)`` into ``[slow, fast]``; slow has ``T // alpha``
        frames spread evenly over the clip (the same indices as PySlowFast's PackPathway)."""
        t = clip.shape[2]
        if t < self.alpha:
            raise ValueError(f"clip has {t} frames; SlowFast with alpha={self.alpha} needs at "
                             f"least {self.alpha} (T // alpha slow frames)")
        index = torch.linspace(0, t - 1, t // self.alpha, device=clip.device).long()
        return [clip.index_select(2, index), clip]

    def forward(self, x: Clip) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a fast clip ``(B, C, T, H, W)`` or ``[slow, fast]``."""
        if isinstance(x, torch.Tensor):
            if x.dim() != 5:
                raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
            slow, fast = self.pack_pathways(x)
        else:
            if len(x) != 2:
                raise ValueError(f"expected [slow, fast], got a sequence of {len(x)} tensors")
            slow, fast = x
        slow = self.slow_stem(slow)
        fast = self.fast_stem(fast)
        slow = self.fuse_stem.fuse(slow, fast)
        for name in ("res2", "res3", "res4", "res5"):
            slow = getattr(self, f"slow_{name}")(slow)
            fast = getattr(self, f"fast_{name}")(fast)
            if name != "res5":
                slow = getattr(self, f"fuse_{name}").fuse(slow, fast)
        return self.head(slow, fast)


def _facts(params: int, alpha: int, crop: int = 224, frames: int = 32, **extra: Any) -> dict:
    facts = {
        "task": "video",
        "input_frames": frames,
        "sampling_stride": 2,
        "crop_size": crop,
        "mean": list(_KINETICS_MEAN),
        "std": list(_KINETICS_STD),
        "params": params,
        "alpha": alpha,
    }
    facts.update(extra)
    return facts


def _build(defaults: Dict[str, Any], num_classes: int, kwargs: Dict[str, Any]) -> SlowFast:
    args = dict(defaults)
    args.update(kwargs)
    return SlowFast(num_classes=num_classes, **args)


_R50_4X16 = dict(depth=50, alpha=8, beta_inv=8, fusion_kernel=5, width=64, dropout=0.5)
_R50_8X8 = dict(depth=50, alpha=4, beta_inv=8, fusion_kernel=7, width=64, dropout=0.5)
_TINY_R18 = dict(depth=18, alpha=4, beta_inv=4, fusion_kernel=5, width=16, dropout=0.5)


@MODEL_REGISTRY.register()
def slowfast_4x16_resnet50(num_classes: int = 400, **kwargs: Any) -> nn.Module:
    """SlowFast R50 4x16: 32 fast frames at stride 2, slow sees 4 (alpha 8, beta_inv 8, k 5).

    Args:
        num_classes: Output classes.
        **kwargs: Override any :class:`SlowFast` argument (``width``, ``dropout``, ...).
    """
    return _build(_R50_4X16, num_classes, kwargs)


@MODEL_REGISTRY.register()
def slowfast_8x8_resnet50(num_classes: int = 400, **kwargs: Any) -> nn.Module:
    """SlowFast R50 8x8: 32 fast frames at stride 2, slow sees 8 (alpha 4, beta_inv 8, k 7).

    Args:
        num_classes: Output classes.
        **kwargs: Override any :class:`SlowFast` argument (``width``, ``dropout``, ...).
    """
    return _build(_R50_8X8, num_classes, kwargs)


@MODEL_REGISTRY.register()
def slowfast_tiny_resnet18(num_classes: int = 400, **kwargs: Any) -> nn.Module:
    """A small SlowFast for CPU runs: (2, 2, 2, 2) bottlenecks, width 16 (fast 4), alpha 4.

    Meant for 16 fast frames at 56x56 (the slow pathway sees 4).

    Args:
        num_classes: Output classes.
        **kwargs: Override any :class:`SlowFast` argument (``width``, ``beta_inv``, ``alpha``,
            ``depth``, ``dropout``, ...).
    """
    return _build(_TINY_R18, num_classes, kwargs)


# Parameter counts at 400 classes (the R50 ones equal PySlowFast's; checked in tests). gflops are
# multiply-adds per 32-frame view at crop_size (PySlowFast quotes 36.1 / 65.7 at 256x256).
slowfast_4x16_resnet50.facts = _facts(34_480_216, alpha=8, published_top1=75.6, gflops=27.6)
slowfast_8x8_resnet50.facts = _facts(34_566_488, alpha=4, published_top1=77.0, gflops=50.3)
slowfast_tiny_resnet18.facts = _facts(1_660_324, alpha=4, crop=56, frames=16)
