"""The layers of a Multiscale Vision Transformer (zoo/models/mvit.py builds the network).

Layer for layer PySlowFast's ``MultiScaleAttention`` / ``MultiScaleBlock``
(``slowfast/models/attention.py``), with PySlowFast's module names so its ``.pyth`` files load as
they are: pooling attention (queries, keys and values pooled by a channel-wise conv, an average or
a max pool), MViTv2's decomposed relative positions and residual pooling, and MViTv1's
projection of the width in the MLP branch.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from ..utils.errors import UserError
from .blockwise import drop_path_module


class MViTConfigError(UserError, ValueError):
    """An MViT argument the model cannot honour; the message names it and what to use."""

__all__ = ["MViTConfigError", "Mlp", "MultiScaleAttention", "MultiScaleBlock", "pool_tokens",
           "resize_table"]

Thw = Tuple[int, int, int]


class Mlp(nn.Module):
    """``fc1``, GELU, ``fc2`` (dropout after each when ``dropout`` > 0)."""

    def __init__(self, dim_in: int, hidden: int, dim_out: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim_in, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim_out)
        self.drop = nn.Dropout(dropout) if dropout > 0.0 else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))


def pool_tokens(x: torch.Tensor, pool: Optional[nn.Module], thw: Thw, has_cls: bool,
                norm: Optional[nn.Module] = None) -> Tuple[torch.Tensor, Thw]:
    """Pool the token grid ``thw`` of ``x`` (``(B, N, L, C)`` per head, or ``(B, L, C)``) with
    ``pool``; the class token (first) passes unpooled, then ``norm`` sees every token."""
    if pool is None:
        return x, thw
    squeeze = x.dim() == 3
    if squeeze:
        x = x.unsqueeze(1)
    if has_cls:
        cls_tok, x = x[:, :, :1], x[:, :, 1:]
    b, n, _, c = x.shape
    grid = x.reshape(b * n, *thw, c).permute(0, 4, 1, 2, 3)
    grid = pool(grid)
    thw = tuple(grid.shape[2:])
    x = grid.reshape(b, n, c, -1).transpose(2, 3)
    if has_cls:
        x = torch.cat((cls_tok, x), dim=2)
    if norm is not None:
        x = norm(x)
    return (x.squeeze(1) if squeeze else x), thw


def resize_table(table: torch.Tensor, size: int) -> torch.Tensor:
    """A relative-position table ``(L, C)`` linearly resized to ``size`` rows."""
    if table.shape[0] == size:
        return table
    resized = F.interpolate(table.t().unsqueeze(0), size=size, mode="linear")
    return resized.squeeze(0).t()


def _distances(q: int, k: int, device: torch.device) -> torch.Tensor:
    """Row index of each (query, key) pair in a table of ``2 * max(q, k) - 1`` offsets, the
    coarser grid's coordinates stretched to the finer one's. Computed on ``device``: made on the
    CPU, its copy to a GPU would wait for the GPU, in every attention layer of every step."""
    q_ratio, k_ratio = max(k / q, 1.0), max(q / k, 1.0)
    dist = (torch.arange(q, device=device)[:, None] * q_ratio
            - torch.arange(k, device=device)[None, :] * k_ratio + (k - 1) * k_ratio)
    return dist.long()


def _rel_pos_bias(q: torch.Tensor, q_thw: Thw, k_thw: Thw, tables: Sequence[torch.Tensor],
                  spatial: bool, temporal: bool) -> torch.Tensor:
    """MViTv2's decomposed relative-position term ``(B, heads, Lq, Lk)`` for the patch tokens of
    ``q`` (``(B, heads, Lq, C)``, class token removed)."""
    (qt, qh, qw), (kt, kh, kw) = q_thw, k_thw
    b, heads, _, c = q.shape
    r_q = q.reshape(b, heads, qt, qh, qw, c)
    bias = q.new_zeros(b, heads, qt, qh, qw, kt, kh, kw)
    if spatial:
        table_h, table_w = tables[0], tables[1]
        rh = resize_table(table_h, 2 * max(qh, kh) - 1)[_distances(qh, kh, q.device)]
        rw = resize_table(table_w, 2 * max(qw, kw) - 1)[_distances(qw, kw, q.device)]
        rel_h = torch.einsum("bnthwc,hkc->bnthwk", r_q, rh)
        rel_w = torch.einsum("bnthwc,wkc->bnthwk", r_q, rw)
        bias = bias + rel_h[:, :, :, :, :, None, :, None] + rel_w[:, :, :, :, :, None, None, :]
    if temporal:
        rt = resize_table(tables[-1], 2 * max(qt, kt) - 1)[_distances(qt, kt, q.device)]
        rel_t = torch.einsum("bnthwc,tkc->bnthwk", r_q, rt)
        bias = bias + rel_t[:, :, :, :, :, :, None, None]
    return bias.reshape(b, heads, qt * qh * qw, kt * kh * kw)


class MultiScaleAttention(nn.Module):
    """Pooling attention: queries, keys and values, each pooled over the token grid, then
    attention of the pooled queries over the pooled keys (PySlowFast's module of this name).

    Args:
        dim: Input width.
        dim_out: Width of q, k, v and the output.
        input_size: Token grid ``(T, H, W)`` this block sees at the built input size (the size of
            the relative-position tables).
        num_heads: Attention heads.
        qkv_bias: Bias in the q / k / v projections.
        dropout: Dropout after the output projection.
        kernel_q / kernel_kv: Pooling kernels (empty or all ones with stride 1: no pooling).
        stride_q / stride_kv: Pooling strides.
        norm_layer: Norm after a conv pooling.
        has_cls: The first token is a class token (never pooled).
        mode: ``"conv"`` (channel-wise conv shared by the heads), ``"conv_unshared"`` (one per
            channel; only with ``pool_first``), ``"avg"`` or ``"max"``.
        pool_first: Pool the input, then project q, k, v (else project, then pool).
        rel_pos_spatial / rel_pos_temporal: MViTv2's relative positions over H, W / over T.
        rel_pos_zero_init: Start the relative-position tables at zero.
        residual_pooling: Add the pooled queries to the attention output (MViTv2).
        separate_qkv: Three q, k, v linears instead of one ``qkv`` (always so with pool_first).
    """

    def __init__(self, dim: int, dim_out: int, input_size: Sequence[int], num_heads: int,
                 qkv_bias: bool, dropout: float, kernel_q: Sequence[int],
                 kernel_kv: Sequence[int], stride_q: Sequence[int], stride_kv: Sequence[int],
                 norm_layer, has_cls: bool, mode: str, pool_first: bool,
                 rel_pos_spatial: bool, rel_pos_temporal: bool, rel_pos_zero_init: bool,
                 residual_pooling: bool, separate_qkv: bool) -> None:
        super().__init__()
        self.pool_first = pool_first
        self.separate_qkv = separate_qkv or pool_first
        self.num_heads = num_heads
        self.dim_out = dim_out
        self.mode = mode
        self.has_cls = has_cls
        self.residual_pooling = residual_pooling
        head_dim = dim_out // num_heads
        self.scale = head_dim ** -0.5
        if self.separate_qkv:
            self.q = nn.Linear(dim, dim_out, bias=qkv_bias)
            self.k = nn.Linear(dim, dim_out, bias=qkv_bias)
            self.v = nn.Linear(dim, dim_out, bias=qkv_bias)
        else:
            self.qkv = nn.Linear(dim, dim_out * 3, bias=qkv_bias)
        self.proj = nn.Linear(dim_out, dim_out)
        self.proj_drop = nn.Dropout(dropout) if dropout > 0.0 else nn.Identity()

        # A 1x1x1 kernel with stride 1 pools nothing: no layer.
        if math.prod(kernel_q) == 1 and math.prod(stride_q) == 1:
            kernel_q = ()
        if math.prod(kernel_kv) == 1 and math.prod(stride_kv) == 1:
            kernel_kv = ()
        if mode in ("avg", "max"):
            op = nn.MaxPool3d if mode == "max" else nn.AvgPool3d
            self.pool_q = self._pool(op, kernel_q, stride_q)
            self.pool_k = self._pool(op, kernel_kv, stride_kv)
            self.pool_v = self._pool(op, kernel_kv, stride_kv)
            self.norm_q = self.norm_k = self.norm_v = None
        else:  # conv / conv_unshared
            width = dim if pool_first else dim_out
            ch = width // num_heads if mode == "conv" else width
            self.pool_q = self._conv(ch, kernel_q, stride_q)
            self.norm_q = norm_layer(ch) if kernel_q else None
            self.pool_k = self._conv(ch, kernel_kv, stride_kv)
            self.norm_k = norm_layer(ch) if kernel_kv else None
            self.pool_v = self._conv(ch, kernel_kv, stride_kv)
            self.norm_v = norm_layer(ch) if kernel_kv else None

        self.rel_pos_spatial, self.rel_pos_temporal = rel_pos_spatial, rel_pos_temporal
        if rel_pos_spatial:
            size = input_size[1]
            q_size = size // stride_q[1] if len(stride_q) > 0 else size
            kv_size = size // stride_kv[1] if len(stride_kv) > 0 else size
            rows = 2 * max(q_size, kv_size) - 1
            self.rel_pos_h = nn.Parameter(torch.zeros(rows, head_dim))
            self.rel_pos_w = nn.Parameter(torch.zeros(rows, head_dim))
        if rel_pos_temporal:
            self.rel_pos_t = nn.Parameter(torch.zeros(2 * input_size[0] - 1, head_dim))
        if not rel_pos_zero_init:
            for name in ("rel_pos_h", "rel_pos_w", "rel_pos_t"):
                if hasattr(self, name):
                    nn.init.trunc_normal_(getattr(self, name), std=0.02)

    @staticmethod
    def _pool(op, kernel: Sequence[int], stride: Sequence[int]) -> Optional[nn.Module]:
        if not kernel:
            return None
        return op(list(kernel), list(stride), [k // 2 for k in kernel], ceil_mode=False)

    @staticmethod
    def _conv(ch: int, kernel: Sequence[int], stride: Sequence[int]) -> Optional[nn.Module]:
        if not kernel:
            return None
        return nn.Conv3d(ch, ch, list(kernel), stride=list(stride),
                         padding=[k // 2 for k in kernel], groups=ch, bias=False)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        return x.reshape(b, n, self.num_heads, -1).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor, thw: Thw) -> Tuple[torch.Tensor, Thw]:
        b, n, _ = x.shape
        if self.pool_first:
            fold = 1 if self.mode == "conv_unshared" else self.num_heads
            q = k = v = x.reshape(b, n, fold, -1).permute(0, 2, 1, 3)
        elif self.separate_qkv:
            q, k, v = self._heads(self.q(x)), self._heads(self.k(x)), self._heads(self.v(x))
        else:
            q, k, v = self.qkv(x).reshape(b, n, 3, self.num_heads, -1).permute(2, 0, 3, 1, 4)

        q, q_thw = pool_tokens(q, self.pool_q, thw, self.has_cls, self.norm_q)
        k, k_thw = pool_tokens(k, self.pool_k, thw, self.has_cls, self.norm_k)
        v, _ = pool_tokens(v, self.pool_v, thw, self.has_cls, self.norm_v)
        if self.pool_first:
            def flat(t: torch.Tensor) -> torch.Tensor:
                return t.permute(0, 2, 1, 3).reshape(b, t.shape[2], -1)
            q, k, v = self._heads(self.q(flat(q))), self._heads(self.k(flat(k))), \
                self._heads(self.v(flat(v)))

        attn = (q * self.scale) @ k.transpose(-2, -1)
        if self.rel_pos_spatial or self.rel_pos_temporal:
            s = 1 if self.has_cls else 0
            tables = [getattr(self, n) for n in ("rel_pos_h", "rel_pos_w", "rel_pos_t")
                      if hasattr(self, n)]
            bias = _rel_pos_bias(q[:, :, s:], q_thw, k_thw, tables, self.rel_pos_spatial,
                                 self.rel_pos_temporal)
            attn = attn + F.pad(bias, (s, 0, s, 0))
        x = attn.softmax(dim=-1) @ v
        if self.residual_pooling:
            if self.has_cls:
                x = torch.cat((x[:, :, :1], x[:, :, 1:] + q[:, :, 1:]), dim=2)
            else:
                x = x + q
        x = x.transpose(1, 2).reshape(b, -1, self.dim_out)
        return self.proj_drop(self.proj(x)), q_thw


class MultiScaleBlock(nn.Module):
    """norm1, pooling attention (+ the max-pooled shortcut), norm2, MLP (PySlowFast's module of
    this name). The width changes to ``dim_out`` in the attention (``dim_mul_in_att``, MViTv2)
    or in the MLP (MViTv1); ``proj`` projects the shortcut then.

    Args:
        dim: Input width.
        dim_out: Output width.
        num_heads: Attention heads.
        input_size: Token grid at the built input size.
        mlp_ratio: MLP hidden width over its input width.
        drop_path: Stochastic-depth probability of both branches.
        dim_mul_in_att: Change the width in the attention rather than in the MLP.
        **attn: The :class:`MultiScaleAttention` arguments (kernels, strides, mode, ...).
    """

    def __init__(self, dim: int, dim_out: int, num_heads: int, input_size: Sequence[int],
                 mlp_ratio: float, drop_path: float, dropout: float, norm_layer,
                 dim_mul_in_att: bool, stride_q: Sequence[int], **attn) -> None:
        super().__init__()
        self.dim, self.dim_out = dim, dim_out
        self.dim_mul_in_att = dim_mul_in_att
        att_dim = dim_out if dim_mul_in_att else dim
        self.norm1 = norm_layer(dim)
        self.attn = MultiScaleAttention(dim, att_dim, input_size, num_heads, dropout=dropout,
                                        norm_layer=norm_layer, stride_q=stride_q, **attn)
        self.drop_path = drop_path_module(drop_path)
        self.norm2 = norm_layer(att_dim)
        self.mlp = Mlp(att_dim, int(att_dim * mlp_ratio), dim_out, dropout)
        if dim != dim_out:
            self.proj = nn.Linear(dim, dim_out)
        kernel_skip = [s + 1 if s > 1 else s for s in stride_q]
        self.pool_skip = (nn.MaxPool3d(kernel_skip, list(stride_q), [k // 2 for k in kernel_skip],
                                       ceil_mode=False)
                          if len(stride_q) > 0 and math.prod(stride_q) > 1 else None)

    def forward(self, x: torch.Tensor, thw: Thw) -> Tuple[torch.Tensor, Thw]:
        x_norm = self.norm1(x)
        x_attn, thw_new = self.attn(x_norm, thw)
        if self.dim_mul_in_att and self.dim != self.dim_out:
            x = self.proj(x_norm)
        x_res, _ = pool_tokens(x, self.pool_skip, thw, self.attn.has_cls)
        x = x_res + self.drop_path(x_attn)
        x_norm = self.norm2(x)
        x_mlp = self.mlp(x_norm)
        if not self.dim_mul_in_att and self.dim != self.dim_out:
            x = self.proj(x_norm)
        return x + self.drop_path(x_mlp), thw_new


def kv_strides_adaptive(first: Sequence[int], stride_q: List[Sequence[int]]) -> List[List[int]]:
    """PySlowFast's MVIT.POOL_KV_STRIDE_ADAPTIVE: the key/value stride of every block, starting
    at ``first`` and divided by each query stride on the way (at least 1)."""
    out, current = [], list(first)
    for i, sq in enumerate(stride_q):
        if len(sq) > 0:
            current = [max(current[d] // sq[d], 1) for d in range(len(current))]
        out.append([i] + current)
    return out
