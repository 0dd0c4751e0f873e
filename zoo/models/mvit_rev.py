"""Reversible MViT (Mangalam et al., CVPR 2022, "Reversible Vision Transformers"): an MViT whose
blocks carry two residual streams, so that training recomputes each block's input from its output
instead of storing activations.

Laid out as PySlowFast's ``MViT`` with ``MVIT.REV.ENABLE`` (``slowfast/models/
video_model_builder.py``, ``reversible_mvit.py``) with its module names, so PySlowFast's
``REV_MVIT_B_16x4.pyth`` loads as it is. :class:`RevMViT` takes the MVIT keys lowercased, as
:class:`zoo.models.mvit.MViT` does, plus the ``MVIT.REV.<KEY>`` keys as ``rev_<key>``.

Each block is reversible except those listed in ``rev_buffer_layers`` (PySlowFast's name; every
block that pools the queries or changes the width must be one), which fuse the two streams
(``rev_pre_q_fusion``) and run a plain block with a pooled shortcut (``rev_res_path``). Each run
of reversible blocks starts with both streams equal to its input. At the end the two streams are
fused (``rev_respath_fuse``: ``concat`` keeps both, so the head sees twice the last width).

Module tree (``i`` = block)::

    patch_embed.proj                          3D conv patchifying the clip
    pos_embed / pos_embed_spatial / _temporal absolute positions
    norm_stem                                 LayerNorm after the stem (NORM_STEM)
    rev_backbone.layers.{i}.F.norm, F.attn.*  F: LayerNorm, pooling attention (MViT's names)
    rev_backbone.layers.{i}.G.norm, G.mlp.fc1 / fc2   G: LayerNorm, MLP
    rev_backbone.layers.{i}.pre_q_fuse        stage transitions: the streams' fusion
    rev_backbone.layers.{i}.res_proj          stage transitions: shortcut width projection
    fuse                                      the final fusion of the two streams
    norm                                      final LayerNorm
    head.projection                           the classifier (dropout before it)

Training with ``rev_backprop`` (the default) runs each run of reversible blocks through
:class:`zoo.models.mvit_rev_layers.RevBackprop`: only the run's output is kept, and backward
recomputes the inputs block by block, replaying dropout and stochastic depth exactly. Evaluation,
and training with ``rev_backprop=False``, run the same blocks through plain autograd.
Unlike PySlowFast's head (softmax in eval), the model returns logits.
"""

from __future__ import annotations

import math
from functools import partial
from typing import List, Optional, Sequence

import torch
import torch.nn as nn

from ..config.pyslowfast_mvit import MVIT_REV_CONFIGS, builder_kwargs
from .classifier import ClassifierMixin
from .facts import KINETICS_MEAN, KINETICS_STD, video_facts
from .mvit import (
    MViT,
    MViTConfigError,
    TransformerHead,
    grid_mismatch,
    mvit_pool_plan,
    mvit_round_width,
)
from .mvit_positions import PositionResizeMixin
from .mvit_rev_layers import (
    RevBackprop,
    ReversibleBlock,
    StageTransitionBlock,
    TwoStreamFusion,
    fusion_modes,
)
from .registry import register_model

__all__ = ["RevMViT"]

_MODES = ("conv", "conv_unshared", "avg", "max")


def _triple(value: Sequence[int], key: str) -> List[int]:
    value = [int(v) for v in value]
    if len(value) != 3:
        raise MViTConfigError(f"reversible MViT {key}={value}: give 3 values (T, H, W)")
    return value


def _fusion(mode: str, dim: int, key: str) -> TwoStreamFusion:
    try:
        return TwoStreamFusion(mode, dim)
    except ValueError:
        raise MViTConfigError(f"reversible MViT {key}={mode!r}: use one of "
                              f"{fusion_modes()}") from None


class ReversibleStack(nn.Module):
    """PySlowFast's ``ReversibleMViT``: the blocks (``layers``), run as reversible runs and stage
    transitions, then dropout (MVIT.DROPOUT_RATE) on the two streams side by side."""

    def __init__(self, layers: List[nn.Module], dropout: float, rev_backprop: bool) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.dropout, self.rev_backprop = dropout, rev_backprop
        self.runs: List[List[int]] = []  # consecutive reversible blocks, or one transition
        for i, layer in enumerate(layers):
            if isinstance(layer, ReversibleBlock) and self.runs and isinstance(
                    layers[self.runs[-1][-1]], ReversibleBlock):
                self.runs[-1].append(i)
            else:
                self.runs.append([i])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for run in self.runs:
            blocks = [self.layers[i] for i in run]
            if isinstance(blocks[0], StageTransitionBlock):
                x = blocks[0](x)
                continue
            x1 = x2 = x
            if self.training and self.rev_backprop and torch.is_grad_enabled():
                params = [p for b in blocks for p in b.parameters() if p.requires_grad]
                x1, x2 = RevBackprop.apply(x1, x2, blocks, *params)
            else:
                for block in blocks:
                    x1, x2 = block(x1, x2)
            x = torch.cat((x1, x2), dim=-1)
        return nn.functional.dropout(x, p=self.dropout, training=self.training)


class RevMViT(ClassifierMixin, PositionResizeMixin, nn.Module):
    """Reversible MViT with PySlowFast's layers and names (see the module docstring).

    Keyword arguments are those of :class:`zoo.models.mvit.MViT` (PySlowFast's ``MVIT.<KEY>``
    lowercased, with its defaults; ``dim_mul_in_att`` has no effect, as in PySlowFast: the width
    always changes in a transition's attention), and:

    Args:
        rev_respath_fuse: Final fusion of the two streams (MVIT.REV.RESPATH_FUSE): ``concat``
            (the head sees both), ``add`` / ``avg`` / ``max`` / ``min`` (with
            ``use_mean_pooling``), or ``[ln+]concat_linear[_<mult>[_<dropout>]]``.
        rev_buffer_layers: The non-reversible stage-transition blocks (MVIT.REV.BUFFER_LAYERS).
        rev_res_path: Shortcut pooling of a transition (MVIT.REV.RES_PATH): ``conv`` (the
            attention's query pooling) or ``max``.
        rev_pre_q_fusion: Fusion of the streams entering a transition (MVIT.REV.PRE_Q_FUSION).
        rev_backprop: Recompute activations in backward instead of storing them (zoo's switch;
            PySlowFast always does in training).
    """

    classifier_name = "head.projection"
    head_init_std = 0.02
    # The same stem, init and weight-decay rule as MViT's.
    _positions = MViT._positions
    _init_weights = MViT._init_weights
    no_weight_decay = MViT.no_weight_decay

    def __init__(self, num_classes: int = 400, frames: int = 16, crop_size: int = 224,
                 dropout: float = 0.5, in_channels: int = 3, mode: str = "conv",
                 pool_first: bool = False, cls_embed_on: bool = False,
                 patch_kernel: Sequence[int] = (3, 7, 7), patch_stride: Sequence[int] = (2, 4, 4),
                 patch_padding: Sequence[int] = (2, 4, 4), patch_2d: bool = False,
                 embed_dim: int = 96, num_heads: int = 1, mlp_ratio: float = 4.0,
                 qkv_bias: bool = True, droppath_rate: float = 0.1, depth: int = 16,
                 norm: str = "layernorm", dim_mul: Sequence[Sequence[float]] = (),
                 head_mul: Sequence[Sequence[float]] = (),
                 pool_kv_stride: Sequence[Sequence[int]] = (),
                 pool_kv_stride_adaptive: Optional[Sequence[int]] = None,
                 pool_q_stride: Sequence[Sequence[int]] = (),
                 pool_kvq_kernel: Optional[Sequence[int]] = None,
                 zero_decay_pos_cls: bool = True, norm_stem: bool = False,
                 sep_pos_embed: bool = False, dropout_rate: float = 0.0,
                 use_abs_pos: bool = True, rel_pos_spatial: bool = False,
                 rel_pos_temporal: bool = False, rel_pos_zero_init: bool = False,
                 residual_pooling: bool = False, dim_mul_in_att: bool = False,
                 separate_qkv: bool = False, head_init_scale: float = 1.0,
                 use_mean_pooling: bool = False, use_fixed_sincos_pos: bool = False,
                 rev_respath_fuse: str = "concat", rev_buffer_layers: Sequence[int] = (),
                 rev_res_path: str = "conv", rev_pre_q_fusion: str = "avg",
                 rev_backprop: bool = True) -> None:
        super().__init__()
        self._check(cls_embed_on, norm, mode, pool_first, patch_2d, use_fixed_sincos_pos,
                    rev_res_path, rev_respath_fuse, use_mean_pooling)
        patch_kernel, patch_stride, patch_padding = (
            _triple(v, k) for v, k in ((patch_kernel, "patch_kernel"),
                                       (patch_stride, "patch_stride"),
                                       (patch_padding, "patch_padding")))
        self.zero_decay_pos_cls = zero_decay_pos_cls
        self.cls_embed_on, self.use_mean_pooling = False, use_mean_pooling
        self.use_abs_pos, self.sep_pos_embed = use_abs_pos, sep_pos_embed
        self.patch_dims = [size // s for size, s in zip((frames, crop_size, crop_size),
                                                        patch_stride)]
        if min(self.patch_dims) < 1:
            raise MViTConfigError(f"reversible MViT frames={frames}, crop_size={crop_size}: "
                                  f"smaller than the patch stride {patch_stride}")
        norm_layer = partial(nn.LayerNorm, eps=1e-6)

        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv3d(in_channels, embed_dim, patch_kernel,
                                          stride=patch_stride, padding=patch_padding)
        if use_abs_pos:
            t, h, w = self.patch_dims
            if sep_pos_embed:
                self.pos_embed_spatial = nn.Parameter(torch.zeros(1, h * w, embed_dim))
                self.pos_embed_temporal = nn.Parameter(torch.zeros(1, t, embed_dim))
            else:
                self.pos_embed = nn.Parameter(torch.zeros(1, t * h * w, embed_dim))
        self.pos_drop = nn.Dropout(dropout_rate) if dropout_rate > 0.0 else nn.Identity()
        self.norm_stem = norm_layer(embed_dim) if norm_stem else None

        attn = dict(qkv_bias=qkv_bias, dropout=dropout_rate, has_cls=False, mode=mode,
                    pool_first=pool_first, rel_pos_spatial=rel_pos_spatial,
                    rel_pos_temporal=rel_pos_temporal, rel_pos_zero_init=rel_pos_zero_init,
                    residual_pooling=residual_pooling, separate_qkv=separate_qkv)
        layers, width = self._layers(
            depth, embed_dim, num_heads, mlp_ratio, droppath_rate, dim_mul, head_mul,
            pool_q_stride, pool_kv_stride, pool_kv_stride_adaptive, pool_kvq_kernel,
            [int(i) for i in rev_buffer_layers], rev_pre_q_fusion, rev_res_path, norm_layer, attn)
        self.rev_backbone = ReversibleStack(layers, dropout_rate, rev_backprop)
        self.fuse = _fusion(rev_respath_fuse, 2 * width, "rev_respath_fuse")
        out = 2 * width if "concat" in rev_respath_fuse else width
        self.norm = norm_layer(out)
        self.head = TransformerHead(out, num_classes, dropout)
        self._init_weights(head_init_scale)

    @staticmethod
    def _check(cls_embed_on, norm, mode, pool_first, patch_2d, sincos, res_path, fuse,
               mean_pooling) -> None:
        """One-line errors for what PySlowFast's reversible MViT does not build."""
        if cls_embed_on:
            raise MViTConfigError("reversible MViT cls_embed_on=True: PySlowFast's reversible "
                                  "MViT has no class token (it asserts MVIT.CLS_EMBED_ON False); "
                                  "set it False")
        if norm != "layernorm":
            raise MViTConfigError(f"reversible MViT norm={norm!r}: only 'layernorm' is "
                                  "supported (as in PySlowFast)")
        if mode not in _MODES or (mode == "conv_unshared" and not pool_first):
            raise MViTConfigError(f"reversible MViT mode={mode!r}: use one of {list(_MODES)} "
                                  "('conv_unshared' with pool_first=True)")
        if patch_2d or sincos:
            raise MViTConfigError("reversible MViT patch_2d / use_fixed_sincos_pos: not "
                                  "supported; set both False")
        if res_path not in ("conv", "max"):
            raise MViTConfigError(f"reversible MViT rev_res_path={res_path!r}: use 'conv' or "
                                  "'max'")
        if "concat" not in fuse and not mean_pooling:
            raise MViTConfigError(f"reversible MViT rev_respath_fuse={fuse!r} needs "
                                  "use_mean_pooling=True (PySlowFast normalises before a "
                                  "non-concat fusion only with mean pooling); use 'concat' or "
                                  "set use_mean_pooling=True")

    def _layers(self, depth, embed_dim, num_heads, mlp_ratio, droppath_rate, dim_mul, head_mul,
                pool_q_stride, pool_kv_stride, kv_adaptive, kvq_kernel, buffers, pre_q_fusion,
                res_path, norm_layer, attn):
        """The blocks, with PySlowFast's reversible width rule: a block's width changes inside
        its attention (to ``dim_mul[i]``), so only the transitions change it."""
        dim_muls, head_muls, stride_q, stride_kv, kernel_q, kernel_kv = mvit_pool_plan(
            depth, dim_mul, head_mul, pool_q_stride, pool_kv_stride, kv_adaptive, kvq_kernel)
        bad = [i for i in buffers if not 0 < i < depth - 1 or i - 1 in buffers]
        if bad:
            raise MViTConfigError(f"reversible MViT rev_buffer_layers={buffers}: block {bad[0]} "
                                  f"cannot be a transition (use blocks 1..{depth - 2}, each after "
                                  "a reversible block)")
        concat = "concat" in pre_q_fusion
        drop = [droppath_rate * i / max(depth - 1, 1) for i in range(depth)]
        input_size, layers = list(self.patch_dims), []
        for i in range(depth):
            num_heads = mvit_round_width(num_heads, head_muls[i])
            embed_dim = mvit_round_width(embed_dim, dim_muls[i - 1] if i > 0 else 1.0,
                                         divisor=num_heads)
            dim_out = mvit_round_width(embed_dim, dim_muls[i],
                                       divisor=mvit_round_width(num_heads, head_muls[i + 1]))
            pools = dict(kernel_q=kernel_q[i], kernel_kv=kernel_kv[i], stride_q=stride_q[i],
                         stride_kv=stride_kv[i])
            if i in buffers:
                dim = embed_dim * 2 if concat else embed_dim
                layers.append(StageTransitionBlock(
                    dim, dim_out, input_size, num_heads, mlp_ratio, drop[i], norm_layer,
                    pre_q_fusion=_fusion(pre_q_fusion, dim, "rev_pre_q_fusion").mode,
                    res_path=res_path, **pools, **attn))
            else:
                if dim_out != embed_dim or math.prod(stride_q[i] or [1]) > 1:
                    raise MViTConfigError(
                        f"reversible MViT block {i} changes the width or pools the queries: add "
                        f"it to rev_buffer_layers (now {buffers})")
                layers.append(ReversibleBlock(embed_dim, input_size, mlp_ratio, drop[i],
                                              norm_layer, num_heads=num_heads, **pools, **attn))
            if stride_q[i]:
                input_size = [size // s for size, s in zip(input_size, stride_q[i])]
        return layers, dim_out

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled, normalised feature ``(B, C)`` the classifier sees."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        x = self.patch_embed.proj(x)
        if list(x.shape[2:]) != self.patch_dims:
            raise MViTConfigError(grid_mismatch("reversible MViT", self.patch_dims,
                                                list(x.shape[2:]), self.patch_embed.proj))
        x = x.flatten(2).transpose(1, 2)
        if self.use_abs_pos:
            x = x + self._positions()
        x = self.pos_drop(x)
        if self.norm_stem is not None:
            x = self.norm_stem(x)
        x = self.rev_backbone(x)
        if self.use_mean_pooling:
            return self.norm(self.fuse(x).mean(1))
        return self.fuse(self.norm(x)).mean(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        return self.head(self.forward_features(x))


# Params at 400 classes (PySlowFast's projects/rev README prints 34.9M for this count, 34.96M:
# cut, not rounded); gflops: multiply-adds of one view at the facts' input, counted by
# torch.utils.flop_counter (the README: 64); top-1: Kinetics-400, the README (78.4, 5 views).
_FACTS = {"mvit_rev_b_16x4": (34_963_120, 63.65, 78.4)}


def _register(name: str) -> None:
    config, keys = MVIT_REV_CONFIGS[name]
    kwargs = builder_kwargs(keys)
    frames, stride, crop = kwargs["frames"], keys["DATA.SAMPLING_RATE"], kwargs["crop_size"]
    params, gflops, top1 = _FACTS[name]
    doc = f"""{name}: PySlowFast's ``{config}`` (reversible MViT-B), {frames} frames at stride
    {stride}, {crop}x{crop}.

    Args:
        num_classes: Output classes.
        **kwargs: :class:`RevMViT` arguments (PySlowFast's MVIT keys lowercased, the MVIT.REV
            keys as ``rev_<key>``, ``frames``, ``crop_size``, ``dropout``).
    """
    facts = video_facts(frames, stride, crop, KINETICS_MEAN, KINETICS_STD, params=params,
                        gflops=gflops, published_top1=top1)
    register_model(name, RevMViT, facts, doc, **kwargs)


for _name in MVIT_REV_CONFIGS:
    _register(_name)
