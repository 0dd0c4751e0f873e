"""Multiscale Vision Transformers: MViTv1 (Fan et al., ICCV 2021) and MViTv2 (Li et al., CVPR
2022), a transformer whose token grid shrinks and whose width grows stage by stage, through
pooling attention.

Laid out as PySlowFast's ``MViT`` (``slowfast/models/video_model_builder.py``) with its module
names, so a PySlowFast ``.pyth`` loads as it is. One builder, :class:`MViT`, takes PySlowFast's
``MVIT.<KEY>`` config keys lowercased (``depth``, ``dim_mul``, ``pool_q_stride``, ...) with
PySlowFast's defaults, plus ``frames`` (DATA.NUM_FRAMES), ``crop_size`` (DATA.TRAIN_CROP_SIZE) and
``dropout`` (MODEL.DROPOUT_RATE); each registered name is that builder with the values of the
PySlowFast config of the same network.

Module tree (``i`` = block)::

    patch_embed.proj            3D conv patchifying the clip (MVIT.PATCH_KERNEL / STRIDE / PADDING)
    cls_token                   the class token (CLS_EMBED_ON)
    pos_embed                   absolute positions (USE_ABS_POS), or with SEP_POS_EMBED:
    pos_embed_spatial / _temporal / _class   separate tables added together
    norm_stem                   LayerNorm after the stem (NORM_STEM)
    blocks.{i}.norm1            LayerNorm
    blocks.{i}.attn.qkv         q, k, v projection (``attn.q/k/v`` with SEPARATE_QKV / POOL_FIRST)
    blocks.{i}.attn.pool_q/k/v  channel-wise conv (or avg / max pool) over the token grid
    blocks.{i}.attn.norm_q/k/v  LayerNorm after a conv pooling
    blocks.{i}.attn.rel_pos_h/w/t   MViTv2's relative positions (REL_POS_SPATIAL / _TEMPORAL)
    blocks.{i}.attn.proj        output projection
    blocks.{i}.norm2, mlp.fc1, mlp.fc2   the MLP
    blocks.{i}.proj             shortcut projection where the width changes
    norm                        final LayerNorm
    head.projection             the classifier (dropout before it)

Unlike PySlowFast's head (softmax in eval), the model returns logits. The input must have the
``frames`` x ``crop_size`` x ``crop_size`` the model was built for (PySlowFast asserts the same).
"""

from __future__ import annotations

import math
from functools import partial
from typing import List, Optional, Sequence

import torch
import torch.nn as nn

from ..config.pyslowfast_mvit import MVIT_CONFIGS, builder_kwargs
from .blockwise import BlockwiseMixin
from .classifier import ClassifierMixin
from .facts import IMAGENET_MEAN, IMAGENET_STD, KINETICS_MEAN, KINETICS_STD, video_facts
from .mvit_layers import MultiScaleBlock, MViTConfigError, kv_strides_adaptive
from .mvit_positions import PositionResizeMixin
from .registry import register_model

__all__ = ["MViT", "MViTConfigError", "TransformerHead", "mvit_pool_plan", "mvit_round_width"]

_MODES = ("conv", "conv_unshared", "avg", "max")


def grid_mismatch(what: str, built: List[int], got: List[int], proj: nn.Conv3d) -> str:
    """The one line for a clip whose token grid is not the one the model was built for: in
    frames and pixels, naming the config keys on both sides."""
    st, sh, _ = proj.stride
    t, h, frames, size = built[0] * st, built[1] * sh, got[0] * st, got[1] * sh
    return (f"{what} was built for clips of {t} frames x {h} px (MODEL.KWARGS frames / crop_size) "
            f"but got {frames} frames x {size} px (DATA.CLIP_LEN / CROP_SIZE): set DATA.CLIP_LEN "
            f"{t} / CROP_SIZE {h}, or add 'frames', {frames}, 'crop_size', {size} to MODEL.KWARGS "
            "beside its other entries (an override of KWARGS replaces the whole list; a tested "
            "or predicted checkpoint is built from its own KWARGS, so there only DATA applies); "
            "the position tables of weights trained at another size are resized when loaded")


def mvit_round_width(width: float, multiplier: float, min_width: int = 1,
                     divisor: int = 1) -> int:
    """PySlowFast's ``round_width``: ``width * multiplier`` to a multiple of ``divisor``, never
    below 90% of the exact value."""
    if not multiplier:
        return int(width)
    width *= multiplier
    min_width = min_width or divisor
    out = max(min_width, int(width + divisor / 2) // divisor * divisor)
    if out < 0.9 * width:
        out += divisor
    return int(out)


def _triple(value: Sequence[int], key: str) -> List[int]:
    value = [int(v) for v in value]
    if len(value) != 3:
        raise MViTConfigError(f"MViT {key}={value}: give 3 values (T, H, W)")
    return value


def mvit_pool_plan(depth: int, dim_mul, head_mul, pool_q_stride, pool_kv_stride,
                   kv_adaptive: Optional[Sequence[int]], kvq_kernel: Optional[Sequence[int]]):
    """PySlowFast's per-block plan from its MVIT keys: width and head multipliers (``depth + 1``
    each), then query / key-value pooling strides and kernels (``depth`` each; ``[]`` = none).

    Raises:
        MViTConfigError: for a malformed ``[block, ...]`` entry (one line naming the key).
    """
    dim_muls, head_muls = [1.0] * (depth + 1), [1.0] * (depth + 1)
    for key, table, muls in (("dim_mul", dim_mul, dim_muls),
                             ("head_mul", head_mul, head_muls)):
        for entry in table:
            if len(entry) != 2 or not 0 <= int(entry[0]) <= depth:
                raise MViTConfigError(f"MViT {key} entry {list(entry)}: use [block, factor] "
                                      f"with block in 0..{depth}")
            muls[int(entry[0])] = float(entry[1])
    stride_q: List[List[int]] = [[] for _ in range(depth)]
    stride_kv: List[List[int]] = [[] for _ in range(depth)]
    kernel_q: List[List[int]] = [[] for _ in range(depth)]
    kernel_kv: List[List[int]] = [[] for _ in range(depth)]

    def kernel(stride: List[int]) -> List[int]:
        if kvq_kernel is not None:
            return [int(k) for k in kvq_kernel]
        return [s + 1 if s > 1 else s for s in stride]

    def place(key: str, table, strides, kernels) -> None:
        for entry in table:
            if len(entry) != 4 or not 0 <= int(entry[0]) < depth:
                raise MViTConfigError(f"MViT {key} entry {list(entry)}: use [block, t, h, w] "
                                      f"with block in 0..{depth - 1}")
            i = int(entry[0])
            strides[i] = [int(s) for s in entry[1:]]
            kernels[i] = kernel(strides[i])

    place("pool_q_stride", pool_q_stride, stride_q, kernel_q)
    if kv_adaptive is not None:
        pool_kv_stride = kv_strides_adaptive(_triple(kv_adaptive, "pool_kv_stride_adaptive"),
                                             stride_q)
    place("pool_kv_stride", pool_kv_stride or (), stride_kv, kernel_kv)
    return dim_muls, head_muls, stride_q, stride_kv, kernel_q, kernel_kv


class TransformerHead(nn.Module):
    """Dropout, then the linear classifier ``projection`` (PySlowFast's TransformerBasicHead
    without its eval-time softmax)."""

    def __init__(self, dim: int, num_classes: int, dropout: float) -> None:
        super().__init__()
        if dropout > 0.0:
            self.dropout = nn.Dropout(dropout)
        self.projection = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "dropout"):
            x = self.dropout(x)
        return self.projection(x)


class MViT(BlockwiseMixin, ClassifierMixin, PositionResizeMixin, nn.Module):
    """MViTv1 / MViTv2 with PySlowFast's layers and names (see the module docstring).

    Keyword arguments are PySlowFast's ``MVIT.<KEY>`` keys lowercased, with its defaults; list
    keys keep PySlowFast's ``[[block, value...], ...]`` form.

    Args:
        num_classes: Output classes (MODEL.NUM_CLASSES).
        frames: Input frames (DATA.NUM_FRAMES).
        crop_size: Input side (DATA.TRAIN_CROP_SIZE; PySlowFast needs TEST_CROP_SIZE equal).
        dropout: Dropout before the classifier (MODEL.DROPOUT_RATE).
        in_channels: Input channels (DATA.INPUT_CHANNEL_NUM[0]).
        mode: Pooling: ``conv``, ``conv_unshared`` (with pool_first), ``avg`` or ``max``.
        pool_first: Pool before the q, k, v projections.
        cls_embed_on: Prepend a class token (its output feeds the head).
        patch_kernel / patch_stride / patch_padding: The patchifying conv.
        patch_2d: 2D patches (images); not supported: always False.
        embed_dim: Width of the first block.
        num_heads: Heads of the first block.
        mlp_ratio: MLP hidden width over its input.
        qkv_bias: Bias in the q, k, v projections.
        droppath_rate: Stochastic depth of the last block (linear from 0).
        depth: Number of blocks.
        norm: ``layernorm`` (eps 1e-6), the only norm PySlowFast has.
        dim_mul / head_mul: ``[[i, factor], ...]``: width / heads multiplied from block ``i``.
        pool_kv_stride: ``[[i, t, h, w], ...]``: key/value pooling strides.
        pool_kv_stride_adaptive: ``[t, h, w]`` of block 0, divided by each query stride after
            (replaces pool_kv_stride).
        pool_q_stride: ``[[i, t, h, w], ...]``: query pooling strides (the token grid shrinks).
        pool_kvq_kernel: Kernel of every pooling; None: stride + 1 where the stride is > 1.
        zero_decay_pos_cls: No weight decay on positions and the class token (see
            :meth:`no_weight_decay`).
        norm_stem: LayerNorm after the patch embedding.
        sep_pos_embed: Separate spatial, temporal and class position tables.
        dropout_rate: Dropout inside the blocks and after the positions (MVIT.DROPOUT_RATE).
        use_abs_pos: Absolute position tables.
        rel_pos_spatial / rel_pos_temporal: MViTv2's relative positions.
        rel_pos_zero_init: Relative positions start at zero.
        residual_pooling: MViTv2's pooled-query residual in the attention.
        dim_mul_in_att: Change the width in the attention (MViTv2) instead of the MLP (MViTv1).
        separate_qkv: Three q, k, v linears instead of one.
        head_init_scale: Multiplies the classifier's initial weights.
        use_mean_pooling: Mean of the patch tokens, then the norm (else the class token, or the
            mean after the norm without one).
        use_fixed_sincos_pos: Frozen sine-cosine positions; not supported: always False.
        drop_path: zoo's name for ``droppath_rate`` (every family's stochastic-depth argument);
            replaces it when given.
    """

    classifier_name = "head.projection"
    head_init_std = 0.02

    # Position tables of one (frames, crop): the trainer refuses CONFIG.TRAIN.MULTIGRID.
    fixed_input_shape = True

    def __init__(self, num_classes: int = 400, frames: int = 8, crop_size: int = 224,
                 dropout: float = 0.5, in_channels: int = 3, mode: str = "conv",
                 pool_first: bool = False, cls_embed_on: bool = True,
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
                 drop_path: Optional[float] = None) -> None:
        super().__init__()
        if drop_path is not None:
            droppath_rate = drop_path
        if norm != "layernorm":
            raise MViTConfigError(f"MViT norm={norm!r}: only 'layernorm' is supported "
                                  "(as in PySlowFast)")
        if mode not in _MODES:
            raise MViTConfigError(f"MViT mode={mode!r}: use one of {list(_MODES)}")
        if mode == "conv_unshared" and not pool_first:
            raise MViTConfigError("MViT mode='conv_unshared' needs pool_first=True "
                                  "(as in PySlowFast)")
        if patch_2d:
            raise MViTConfigError("MViT patch_2d=True (MVIT.PATCH_2D, image patches) is not "
                                  "supported: zoo's MViT patchifies clips; set it False")
        if use_fixed_sincos_pos:
            raise MViTConfigError("MViT use_fixed_sincos_pos=True (MVIT.USE_FIXED_SINCOS_POS) "
                                  "is not supported; set it False")
        patch_kernel = _triple(patch_kernel, "patch_kernel")
        patch_stride = _triple(patch_stride, "patch_stride")
        patch_padding = _triple(patch_padding, "patch_padding")
        self.zero_decay_pos_cls = zero_decay_pos_cls
        self.cls_embed_on, self.use_mean_pooling = cls_embed_on, use_mean_pooling
        self.use_abs_pos, self.sep_pos_embed = use_abs_pos, sep_pos_embed
        self.patch_dims = [size // s for size, s in zip((frames, crop_size, crop_size),
                                                        patch_stride)]
        if min(self.patch_dims) < 1:
            raise MViTConfigError(f"MViT frames={frames}, crop_size={crop_size}: smaller than "
                                  f"the patch stride {patch_stride}")
        norm_layer = partial(nn.LayerNorm, eps=1e-6)

        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv3d(in_channels, embed_dim, patch_kernel,
                                          stride=patch_stride, padding=patch_padding)
        num_patches = math.prod(self.patch_dims)
        if cls_embed_on:
            self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        if use_abs_pos:
            if sep_pos_embed:
                t, h, w = self.patch_dims
                self.pos_embed_spatial = nn.Parameter(torch.zeros(1, h * w, embed_dim))
                self.pos_embed_temporal = nn.Parameter(torch.zeros(1, t, embed_dim))
                if cls_embed_on:
                    self.pos_embed_class = nn.Parameter(torch.zeros(1, 1, embed_dim))
            else:
                self.pos_embed = nn.Parameter(
                    torch.zeros(1, num_patches + int(cls_embed_on), embed_dim))
        self.pos_drop = nn.Dropout(dropout_rate) if dropout_rate > 0.0 else nn.Identity()
        self.norm_stem = norm_layer(embed_dim) if norm_stem else None

        self.blocks = nn.ModuleList(self._blocks(
            depth, embed_dim, num_heads, dim_mul, head_mul, pool_q_stride, pool_kv_stride,
            pool_kv_stride_adaptive, pool_kvq_kernel, norm_layer,
            dict(mlp_ratio=mlp_ratio, dropout=dropout_rate, dim_mul_in_att=dim_mul_in_att,
                 qkv_bias=qkv_bias, has_cls=cls_embed_on, mode=mode, pool_first=pool_first,
                 rel_pos_spatial=rel_pos_spatial, rel_pos_temporal=rel_pos_temporal,
                 rel_pos_zero_init=rel_pos_zero_init, residual_pooling=residual_pooling,
                 separate_qkv=separate_qkv),
            droppath_rate))
        width = self.blocks[-1].dim_out
        self.norm = norm_layer(width)
        self.head = TransformerHead(width, num_classes, dropout)
        self._init_weights(head_init_scale)

    def _blocks(self, depth, embed_dim, num_heads, dim_mul, head_mul, pool_q_stride,
                pool_kv_stride, kv_adaptive, kvq_kernel, norm_layer, common, droppath_rate):
        """The blocks, with PySlowFast's rule for each one's width, heads, kernels and strides."""
        dim_muls, head_muls, stride_q, stride_kv, kernel_q, kernel_kv = mvit_pool_plan(
            depth, dim_mul, head_mul, pool_q_stride, pool_kv_stride, kv_adaptive, kvq_kernel)

        drop = [droppath_rate * i / max(depth - 1, 1) for i in range(depth)]  # linear from 0
        input_size = list(self.patch_dims)
        blocks = []
        for i in range(depth):
            num_heads = mvit_round_width(num_heads, head_muls[i])
            if common["dim_mul_in_att"]:
                dim_out = mvit_round_width(embed_dim, dim_muls[i],
                                           divisor=mvit_round_width(num_heads, head_muls[i]))
            else:
                dim_out = mvit_round_width(embed_dim, dim_muls[i + 1],
                                           divisor=mvit_round_width(num_heads, head_muls[i + 1]))
            blocks.append(MultiScaleBlock(
                embed_dim, dim_out, num_heads, list(input_size), drop_path=drop[i],
                norm_layer=norm_layer, kernel_q=kernel_q[i], kernel_kv=kernel_kv[i],
                stride_q=stride_q[i], stride_kv=stride_kv[i], **common))
            if stride_q[i]:
                input_size = [size // s for size, s in zip(input_size, stride_q[i])]
            embed_dim = dim_out
        return blocks

    def _init_weights(self, head_init_scale: float) -> None:
        """PySlowFast's init: truncated normal (std 0.02) weights and positions, linear and
        LayerNorm biases 0.02, the classifier scaled by ``head_init_scale``."""
        for name in ("pos_embed", "pos_embed_spatial", "pos_embed_temporal", "pos_embed_class",
                     "cls_token"):
            if hasattr(self, name):
                nn.init.trunc_normal_(getattr(self, name), std=0.02)
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Conv3d)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if isinstance(m, nn.Linear) and m.bias is not None:
                    nn.init.constant_(m.bias, 0.02)
            elif isinstance(m, nn.LayerNorm):
                nn.init.constant_(m.bias, 0.02)
                nn.init.constant_(m.weight, 1.0)
        with torch.no_grad():
            self.head.projection.weight.mul_(head_init_scale)
            self.head.projection.bias.mul_(head_init_scale)

    def checkpoint_blocks(self) -> List[nn.Module]:
        return list(self.blocks)

    def layer_id(self, name: str) -> int:
        """PySlowFast's MViT rule (``get_param_groups``): the class token, positions and patch
        embedding are layer 0, ``blocks.i`` is i + 1, the rest (``norm_stem``, ``norm``,
        ``head``) depth + 1."""
        if name == "cls_token" or name.startswith(("pos_embed", "patch_embed.")):
            return 0
        if name.startswith("blocks."):
            return int(name.split(".")[1]) + 1
        return len(self.blocks) + 1

    def num_layers(self) -> int:
        return len(self.blocks) + 2

    def no_weight_decay(self) -> List[str]:
        """Parameter names (last component) trained without weight decay: the positions and the
        class token when ``zero_decay_pos_cls`` (PySlowFast's MVIT.ZERO_DECAY_POS_CLS)."""
        if not self.zero_decay_pos_cls:
            return []
        return ["pos_embed", "pos_embed_spatial", "pos_embed_temporal", "pos_embed_class",
                "rel_pos_h", "rel_pos_w", "rel_pos_t", "cls_token"]

    def _positions(self) -> torch.Tensor:
        if not self.sep_pos_embed:
            return self.pos_embed
        t, h, w = self.patch_dims
        pos = (self.pos_embed_spatial.repeat(1, t, 1)
               + torch.repeat_interleave(self.pos_embed_temporal, h * w, dim=1))
        if self.cls_embed_on:
            pos = torch.cat((self.pos_embed_class, pos), dim=1)
        return pos

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled, normalised feature ``(B, C)`` the classifier sees."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        x = self.patch_embed.proj(x)
        thw = tuple(x.shape[2:])
        if list(thw) != self.patch_dims:
            raise MViTConfigError(grid_mismatch("MViT", self.patch_dims, list(thw),
                                                self.patch_embed.proj))
        x = x.flatten(2).transpose(1, 2)
        if self.cls_embed_on:
            x = torch.cat((self.cls_token.expand(x.shape[0], -1, -1), x), dim=1)
        if self.use_abs_pos:
            x = x + self._positions()
        x = self.pos_drop(x)
        if self.norm_stem is not None:
            x = self.norm_stem(x)
        for block in self.blocks:
            x, thw = block(x, thw)
        if self.use_mean_pooling:
            return self.norm((x[:, 1:] if self.cls_embed_on else x).mean(1))
        x = self.norm(x)
        return x[:, 0] if self.cls_embed_on else x.mean(1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        return self.head(self.forward_features(x))


# Params at 400 classes (mvit_v2_s and mvit_v1_b_16x4 equal torchvision's mvit_v2_s 34,537,744 and
# mvit_v1_b 36,610,672; MViTv2-B rounds to the published 51.2M; MViTv2-L is 213.4M where the K400
# table prints 217.6M, its SSv2 row 213.1M = this network at 174 classes); gflops: multiply-adds
# of one view at the facts' input, counted by torch.utils.flop_counter (recounted in the tests;
# S 64.2, B 224.5, L 2823 against the published 64, 225, 2828); top-1: Kinetics-400, PySlowFast's
# projects/mvitv2 README (MViTv2) and MODEL_ZOO.md (MViTv1; its 32x3 config has 24 blocks).
_FACTS = {
    "mvit_v2_s": (34_537_744, 64.22, 81.0, KINETICS_MEAN, KINETICS_STD),
    "mvit_v2_b": (51_230_128, 224.47, 82.9, KINETICS_MEAN, KINETICS_STD),
    "mvit_v2_l": (213_390_112, 2823.40, 86.1, IMAGENET_MEAN, IMAGENET_STD),
    "mvit_v1_b_16x4": (36_610_672, 70.60, 78.4, KINETICS_MEAN, KINETICS_STD),
    "mvit_v1_b_32x3": (53_115_280, 235.78, 80.4, KINETICS_MEAN, KINETICS_STD),
}


def _register(name: str) -> None:
    config, keys = MVIT_CONFIGS[name]
    kwargs = builder_kwargs(keys, config)
    frames, stride, crop = kwargs["frames"], keys["DATA.SAMPLING_RATE"], kwargs["crop_size"]
    params, gflops, top1, mean, std = _FACTS[name]
    doc = f"""{name}: PySlowFast's ``{config}``, {frames} frames at stride {stride},
    {crop}x{crop}.

    Args:
        num_classes: Output classes.
        **kwargs: :class:`MViT` arguments (PySlowFast's MVIT keys lowercased, ``frames``,
            ``crop_size``, ``dropout``).
    """
    facts = video_facts(frames, stride, crop, mean, std, params=params, gflops=gflops,
                        published_top1=top1)
    register_model(name, MViT, facts, doc, **kwargs)


for _name in MVIT_CONFIGS:
    _register(_name)
