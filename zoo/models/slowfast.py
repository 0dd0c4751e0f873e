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
``fuse_stem.conv``, ``s{n}_fuse`` -> ``fuse_res{n}`` (n = 2..4), ``s{n}.pathway1_res{j}.branch2.a``
-> ``fast_res{n}.{j}.conv_a`` (``a_bn`` -> ``bn_a``), ``branch1`` / ``branch1_bn`` ->
``shortcut.conv`` / ``shortcut.bn``, ``head.projection`` -> ``head.proj``. The R50 nets have 662
state-dict entries and the R101 nets 1274, the same counts as PySlowFast / PyTorchVideo
checkpoints. ``zoo.models.weights.convert`` maps the PySlowFast, PyTorchVideo and MMAction2
schemes. With ``fuse_norm_act=False`` the laterals are bare convs (MMAction2's design; no
``fuse_*.bn``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from ..utils.device_constants import device_constant
from .blocks3d import STAGE_BLOCKS, Bottleneck, Stem, block_kernels, init_3d_weights, make_stage
from .blockwise import StageLayersMixin
from .classifier import ClassifierMixin
from .facts import KINETICS_MEAN, KINETICS_STD, ModelFacts, video_facts
from .nonlocal_block import NonLocal3d, attach_nonlocal
from .registry import register_model

__all__ = ["SlowFast", "STAGE_BLOCKS", "Bottleneck"]

# Temporal kernel (slow, fast) of the stem and of conv a in res2..res5. The slow pathway has no
# temporal conv before res4: the paper found early temporal kernels hurt at low frame rates.
_STEM_KT = (1, 5)
_STAGE_KT = ((1, 3), (1, 3), (3, 3), (3, 3))

Clip = Union[torch.Tensor, Sequence[torch.Tensor]]


class Fuse(nn.Module):
    """Fast -> slow lateral: Conv3d (k, 1, 1) with temporal stride alpha, then BN and ReLU.

    Args:
        fast_ch: Channels of the fast features.
        ratio: Output channels are ``ratio * fast_ch``.
        kernel: Temporal kernel size k.
        alpha: Frame-rate ratio between the pathways (the temporal stride).
        norm_act: Follow the conv with BN + ReLU (PySlowFast, PyTorchVideo). ``False`` gives
            MMAction2's lateral, a bare conv (no ``bn`` keys in the state dict).
    """

    def __init__(self, fast_ch: int, ratio: int, kernel: int, alpha: int,
                 norm_act: bool = True) -> None:
        super().__init__()
        self.conv = nn.Conv3d(fast_ch, fast_ch * ratio, (kernel, 1, 1), stride=(alpha, 1, 1),
                              padding=(kernel // 2, 0, 0), bias=False)
        self.bn = nn.BatchNorm3d(fast_ch * ratio) if norm_act else None
        self.relu = nn.ReLU(inplace=True) if norm_act else nn.Identity()

    def forward(self, fast: torch.Tensor) -> torch.Tensor:
        x = self.conv(fast)
        if self.bn is not None:
            x = self.bn(x)
        return self.relu(x)

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


def _check_args(depth: int, alpha: int, beta_inv: int, ratio: int, kernel: int, width: int,
                slow_index: str, temp_blocks: List[Optional[int]]) -> None:
    """Raise a ValueError naming the first :class:`SlowFast` argument out of range."""
    if slow_index not in ("linspace", "stride"):
        raise ValueError(f"slow_index must be 'linspace' or 'stride', got {slow_index!r}")
    if depth not in STAGE_BLOCKS:
        raise ValueError(f"depth must be one of {sorted(STAGE_BLOCKS)}, got {depth}")
    if alpha < 1 or beta_inv < 1 or ratio < 1 or kernel < 1:
        raise ValueError("alpha, beta_inv, fusion_conv_channel_ratio and fusion_kernel must "
                         f"be >= 1, got {alpha}, {beta_inv}, {ratio}, {kernel}")
    if width < beta_inv or width % beta_inv:
        raise ValueError(f"width ({width}) must be a positive multiple of beta_inv "
                         f"({beta_inv}) so the fast pathway has width // beta_inv channels")
    if len(temp_blocks) != 4:
        raise ValueError(f"num_block_temp_kernel must list 4 stages, got {temp_blocks}")


class SlowFast(StageLayersMixin, ClassifierMixin, nn.Module):
    """SlowFast network with ResNet bottleneck pathways; its classifier is ``head.proj``.

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
        drop_path: Stochastic depth of each pathway's last residual block (linear from 0 at
            the first).
        zero_init_final_bn: Start each bottleneck's ``bn_c`` gamma at 0 so every block starts as
            identity; PySlowFast's Kinetics configs do this (``ZERO_INIT_FINAL_BN: True``).
        head_init_std: Std of the normal init of the head projection.
        num_block_temp_kernel: Per stage (res2..res5), how many leading blocks keep their
            temporal kernel; later blocks use 1 (PySlowFast's ``NUM_BLOCK_TEMP_KERNEL``, e.g.
            ``(3, 4, 6, 3)`` for the R101 "50_50" nets). ``None`` = every block.
        fuse_norm_act: Laterals are conv + BN + ReLU (PySlowFast); ``False`` makes them a bare
            conv as in MMAction2, so an MMAction2 checkpoint converts exactly.
        slow_index: How a single clip's slow frames are picked: ``"linspace"`` (``T // alpha``
            frames spread from the first to the last, PySlowFast's PackPathway) or ``"stride"``
            (every ``alpha``-th frame from the first, gluoncv's ``x[:, :, ::alpha]``).
        fast_num_block_temp_kernel: The fast pathway's ``num_block_temp_kernel`` where it
            differs from the slow one's (PySlowFast's R101 "50_101" nets); None = the same.
        nonlocal_blocks: Per stage (res2..res5), the slow-pathway blocks followed by a
            :class:`~zoo.models.nonlocal_block.NonLocal3d` (PySlowFast's ``NONLOCAL.LOCATION``
            of pathway 0; keys ``slow_res{n}.{j}.nonlocal_block.*``). None = none.
        fast_nonlocal_blocks: The same for the fast pathway.
        nonlocal_instantiation: ``"softmax"`` or ``"dot_product"`` (``NONLOCAL.INSTANTIATION``).
        nonlocal_pool: Per stage, the ``(t, h, w)`` max-pool before ``phi`` and ``g``
            (``NONLOCAL.POOL``; None = none).
        nonlocal_group: Per stage, the slow pathway's time chunks (``NONLOCAL.GROUP``; None = 1).
    """

    classifier_name = "head.proj"

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
        num_block_temp_kernel: Optional[Sequence[int]] = None,
        fuse_norm_act: bool = True,
        slow_index: str = "linspace",
        fast_num_block_temp_kernel: Optional[Sequence[int]] = None,
        nonlocal_blocks: Optional[Sequence[Sequence[int]]] = None,
        fast_nonlocal_blocks: Optional[Sequence[Sequence[int]]] = None,
        nonlocal_instantiation: str = "softmax",
        nonlocal_pool: Optional[Sequence[Sequence[int]]] = None,
        nonlocal_group: Optional[Sequence[int]] = None,
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        temp_blocks = list(num_block_temp_kernel or [None] * 4)
        fast_temp = list(fast_num_block_temp_kernel or temp_blocks)
        nl_at = {"slow": list(nonlocal_blocks or [()] * 4),
                 "fast": list(fast_nonlocal_blocks or [()] * 4)}
        _check_args(depth, alpha, beta_inv, fusion_conv_channel_ratio, fusion_kernel, width,
                    slow_index, temp_blocks)
        self.alpha = alpha
        self.slow_index = slow_index
        ratio = fusion_conv_channel_ratio
        slow_w, fast_w = width, width // beta_inv

        self.slow_stem = Stem(in_channels, slow_w, _STEM_KT[0])
        self.fast_stem = Stem(in_channels, fast_w, _STEM_KT[1])
        self.fuse_stem = Fuse(fast_w, ratio, fusion_kernel, alpha, fuse_norm_act)
        slow_in, fast_in = slow_w + fast_w * ratio, fast_w

        blocks = STAGE_BLOCKS[depth]
        for i, (n, (kt_slow, kt_fast)) in enumerate(zip(blocks, _STAGE_KT)):
            name, stride, mult = f"res{i + 2}", 1 if i == 0 else 2, 2**i
            slow_inner, fast_inner = slow_w * mult, fast_w * mult
            slow_out, fast_out = slow_inner * 4, fast_inner * 4
            slow_kts = block_kernels([kt_slow], n, temp_blocks[i])
            fast_kts = block_kernels([kt_fast], n, fast_temp[i])
            for path, stage in (
                ("slow", make_stage(slow_in, slow_inner, slow_out, slow_kts, stride)),
                ("fast", make_stage(fast_in, fast_inner, fast_out, fast_kts, stride)),
            ):
                attach_nonlocal(stage, nl_at[path][i], slow_out if path == "slow" else fast_out,
                                f"{path}_{name}", instantiation=nonlocal_instantiation,
                                pool=tuple(nonlocal_pool[i]) if nonlocal_pool else (1, 1, 1),
                                group=nonlocal_group[i] if nonlocal_group else 1)
                self.add_module(f"{path}_{name}", stage)
            slow_in, fast_in = slow_out, fast_out
            if i < 3:  # laterals after res2..res4; res5 feeds the head directly
                self.add_module(f"fuse_{name}",
                                Fuse(fast_out, ratio, fusion_kernel, alpha, fuse_norm_act))
                slow_in += fast_out * ratio

        self.head = Head((slow_in, fast_in), num_classes, dropout)
        self.head_init_std = head_init_std  # what reset_classifier uses too
        init_3d_weights(self, zero_init_final_bn, head_init_std)
        for m in self.modules():
            if isinstance(m, NonLocal3d):
                m.reset_parameters()
        self.set_drop_path_rate(drop_path)

    def pack_pathways(self, clip: torch.Tensor) -> List[torch.Tensor]:
        """Split a fast clip ``(B, C, T, H, W)`` into ``[slow, fast]``; slow has ``T // alpha``
        frames spread evenly over the clip (the same indices as PySlowFast's PackPathway), or
        every ``alpha``-th frame with ``slow_index="stride"``."""
        t = clip.shape[2]
        if t < self.alpha:
            raise ValueError(f"clip has {t} frames; SlowFast with alpha={self.alpha} needs at "
                             f"least {self.alpha} (T // alpha slow frames)")
        # Indices are computed on the CPU from the (static) frame count, so an exported graph
        # holds them as a constant (ONNX's linspace with one step would divide by zero), and
        # written on the clip's device without a copy that would wait for it.
        if self.slow_index == "stride":
            index = list(range(0, t, self.alpha))
        else:
            index = torch.linspace(0, t - 1, t // self.alpha).long().tolist()
        index_t = device_constant(index, clip.device, torch.long)
        if clip.is_contiguous(memory_format=torch.channels_last_3d) and not clip.is_contiguous():
            # Select on the (B, T, H, W, C) view, so the slow clip comes out channels-last too
            # (index_select makes a contiguous tensor, which the slow stem would convert back).
            return [clip.movedim(1, -1).index_select(1, index_t).movedim(-1, 1), clip]
        return [clip.index_select(2, index_t), clip]

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


def _facts(params: int, alpha: int, gflops: float, crop: int = 224, frames: int = 32,
           **extra: Any) -> ModelFacts:
    return video_facts(frames, 2, crop, KINETICS_MEAN, KINETICS_STD, params=params,
                       gflops=gflops, alpha=alpha, **extra)


_DOC = """{summary}

    Args:
        num_classes: Output classes.
        **kwargs: Override any :class:`SlowFast` argument (``width``, ``depth``, ``dropout``...).
    """


def _variant(name: str, defaults: Dict[str, Any], summary: str, facts: ModelFacts) -> None:
    register_model(name, SlowFast, facts, _DOC.format(summary=summary), **defaults)


# Parameter counts at 400 classes (the R50 ones equal PySlowFast's; checked in tests). gflops are
# multiply-adds per view at crop_size counted by torch.utils.flop_counter (tests recount them);
# PySlowFast quotes 36.1 / 65.7 for the R50 nets at 256x256. published_top1: Kinetics-400, 30 views.
_variant(
    "slowfast_4x16_resnet50",
    dict(depth=50, alpha=8, beta_inv=8, fusion_kernel=5, width=64, dropout=0.5),
    "SlowFast R50 4x16: 32 fast frames at stride 2, slow sees 4 (alpha 8, beta_inv 8, k 5).",
    _facts(34_480_216, alpha=8, gflops=27.6, published_top1=75.6),
)
_variant(
    "slowfast_8x8_resnet50",
    dict(depth=50, alpha=4, beta_inv=8, fusion_kernel=7, width=64, dropout=0.5),
    "SlowFast R50 8x8: 32 fast frames at stride 2, slow sees 8 (alpha 4, beta_inv 8, k 7).",
    _facts(34_566_488, alpha=4, gflops=50.3, published_top1=77.0),
)
_variant(
    "slowfast_16x8_resnet50",
    dict(depth=50, alpha=4, beta_inv=8, fusion_kernel=7, width=64, dropout=0.5),
    "SlowFast R50 16x8 (gluoncv's slowfast_16x8_resnet50): the 8x8 R50 net fed 64 fast frames at "
    "stride 2, so the slow pathway sees 16.",
    _facts(34_566_488, alpha=4, gflops=100.6, frames=64),
)
_variant(
    "slowfast_8x8_resnet101",
    dict(depth=101, alpha=4, beta_inv=8, fusion_kernel=5, width=64, dropout=0.5),
    "SlowFast R101 8x8 (PySlowFast SLOWFAST_8x8_R101_101_101): every res4 block temporal, k 5.",
    _facts(62_826_968, alpha=4, gflops=96.4, published_top1=77.9),
)
_variant(
    "slowfast_16x8_resnet101",
    dict(depth=101, alpha=4, beta_inv=8, fusion_kernel=5, width=64, dropout=0.5,
         num_block_temp_kernel=(3, 4, 6, 3)),
    "SlowFast R101 16x8 (PySlowFast SLOWFAST_16x8_R101_50_50): 64 fast frames at stride 2, slow "
    "sees 16; only the first 6 res4 blocks are temporal (the R50 pattern), k 5.",
    _facts(53_774_808, alpha=4, gflops=163.1, frames=64, published_top1=78.9),
)
_variant(
    "slowfast_tiny_resnet18",
    dict(depth=18, alpha=4, beta_inv=4, fusion_kernel=5, width=16, dropout=0.5),
    "A small SlowFast for CPU runs: (2, 2, 2, 2) bottlenecks, width 16 (fast 4), alpha 4; meant "
    "for 16 fast frames at 56x56 (the slow pathway sees 4).",
    _facts(1_660_324, alpha=4, gflops=0.13, crop=56, frames=16),
)
