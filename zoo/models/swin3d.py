"""Video Swin Transformer (Liu et al., CVPR 2022): self-attention inside local 3D windows that
shift by half a window every other block, over a 4-stage hierarchy of patch tokens.

The module tree and state-dict keys are torchvision's ``SwinTransformer3d``, so torchvision's
files load with no mapping; MMAction2's and the original Video-Swin-Transformer repository's
files load through ``--from mmaction2`` (``zoo/models/weights/convert/mmaction2_swin.py``).
The computation is the publisher's, including its handling of sizes that are not multiples of the
window: the tokens are zero-padded at the end (after ``norm1``) to whole windows; a dimension no
larger than the window uses one window of its size and no shift, and the relative position bias is
then read from the top-left corner of the full window's table (as both publishers do).

Module tree (``s`` = stage 0..3 at ``features.{2s}``, ``j`` = block; dims ``C * 2**s``)::

    patch_embed.proj            Conv3d, kernel = stride = patch (2x4x4), 3 -> C
    patch_embed.norm            LayerNorm over channels (tokens are channels-last from here)
    features.{2s}.{j}.norm1     LayerNorm
    features.{2s}.{j}.attn      qkv (Linear dim -> 3 dim), proj (Linear), relative_position_
                                bias_table ((2Wt-1)(2Wh-1)(2Ww-1), heads), relative_position_index
                                (a buffer); window 8x7x7, shifted by 4x3x3 in odd blocks
    features.{2s}.{j}.norm2     LayerNorm
    features.{2s}.{j}.mlp.0/3   Linear dim -> 4 dim, GELU, Linear 4 dim -> dim
    features.{2s+1}             patch merging after stages 0..2: each 2x2 spatial group of
                                tokens concatenated (4 dim), norm, reduction (Linear -> 2 dim)
    norm                        LayerNorm, then the mean over all tokens
    head                        Linear classifier (after dropout ``head_dropout``)

Stochastic depth (``drop_path``) rises linearly from 0 at the first block to ``drop_path`` at the
last, per sample, as in both publishers' code.
"""

from __future__ import annotations

from typing import Any, List, Sequence, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blockwise import BlockwiseMixin
from .classifier import ClassifierMixin
from .facts import video_facts
from .registry import register_model

__all__ = ["SwinTransformer3d", "relative_position_index"]

# ImageNet statistics: the weights start from ImageNet Swin nets (torchvision's and MMAction2's
# preprocessing of these files).
_MEAN = (0.485, 0.456, 0.406)
_STD = (0.229, 0.224, 0.225)
# The attention logit added between tokens of different regions of a shifted window (the
# publishers' value; softmax turns it into ~4e-44).
_MASKED = -100.0


def relative_position_index(window: Sequence[int]) -> torch.Tensor:
    """``(N, N)`` index into the bias table for the ``N = Wt*Wh*Ww`` tokens of a window: the
    offset ``(dt, dh, dw)`` between two tokens, each shifted to start at 0, read as one number in
    the mixed radix ``(2Wt-1, 2Wh-1, 2Ww-1)``."""
    wt, wh, ww = window
    grid = torch.stack(torch.meshgrid(torch.arange(wt), torch.arange(wh), torch.arange(ww),
                                      indexing="ij")).flatten(1)  # (3, N)
    offset = grid[:, :, None] - grid[:, None, :]  # (3, N, N)
    dt, dh, dw = offset[0] + wt - 1, offset[1] + wh - 1, offset[2] + ww - 1
    return (dt * (2 * wh - 1) + dh) * (2 * ww - 1) + dw


def _fit_window(size: Sequence[int], window: Sequence[int],
                shift: Sequence[int]) -> Tuple[List[int], List[int]]:
    """The window and shift used for a ``(T, H, W)`` token grid: along a dimension no larger than
    the window, one window of that size and no shift."""
    win, sh = list(window), list(shift)
    for i in range(3):
        if size[i] <= window[i]:
            win[i], sh[i] = size[i], 0
    return win, sh


def _to_windows(x: torch.Tensor, win: Sequence[int]) -> torch.Tensor:
    """``(B, T, H, W, C)`` (each a multiple of ``win``) -> ``(B * windows, Wt*Wh*Ww, C)``."""
    b, t, h, w, c = x.shape
    x = x.view(b, t // win[0], win[0], h // win[1], win[1], w // win[2], win[2], c)
    return x.permute(0, 1, 3, 5, 2, 4, 6, 7).reshape(-1, win[0] * win[1] * win[2], c)


def _from_windows(x: torch.Tensor, win: Sequence[int], b: int, t: int, h: int,
                  w: int) -> torch.Tensor:
    """The inverse of :func:`_to_windows`."""
    x = x.view(b, t // win[0], h // win[1], w // win[2], win[0], win[1], win[2], -1)
    return x.permute(0, 1, 4, 2, 5, 3, 6, 7).reshape(b, t, h, w, -1)


def _shift_mask(size: Sequence[int], win: Sequence[int], shift: Sequence[int],
                like: torch.Tensor) -> torch.Tensor:
    """``(windows, N, N)`` additive mask of a shifted window partition of the padded grid
    ``size``: after the cyclic roll a window may hold tokens from up to 3 regions per dimension
    (the grid's inside, and the pieces rolled in from the other end); tokens of different regions
    do not attend to each other."""
    labels = []
    for n, k, s in zip(size, win, shift):
        label = torch.zeros(n, dtype=torch.long, device=like.device)
        label[n - k:] = 1
        label[n - s:] = 2
        labels.append(label)
    region = (labels[0][:, None, None] * 9 + labels[1][None, :, None] * 3
              + labels[2][None, None, :])
    region = _to_windows(region[None, ..., None], win).squeeze(-1)  # (windows, N)
    differ = region[:, :, None] != region[:, None, :]
    return torch.zeros(differ.shape, dtype=like.dtype, device=like.device).masked_fill(
        differ, _MASKED)


class WindowAttention3d(nn.Module):
    """Multi-head self-attention inside each (shifted) window, with a learned relative position
    bias per head. Takes and returns channels-last ``(B, T, H, W, C)`` tokens."""

    def __init__(self, dim: int, num_heads: int, window: Sequence[int], shift: Sequence[int],
                 attention_dropout: float = 0.0, dropout: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"width {dim} is not divisible by num_heads {num_heads}")
        self.window, self.shift = list(window), list(shift)
        self.num_heads = num_heads
        self.attention_dropout, self.dropout = attention_dropout, dropout
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        table = (2 * window[0] - 1) * (2 * window[1] - 1) * (2 * window[2] - 1)
        self.relative_position_bias_table = nn.Parameter(torch.zeros(table, num_heads))
        nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
        self.register_buffer("relative_position_index", relative_position_index(window))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, h, w, c = x.shape
        win, shift = _fit_window((t, h, w), self.window, self.shift)
        pad = [(-n) % k for n, k in zip((t, h, w), win)]
        x = F.pad(x, (0, 0, 0, pad[2], 0, pad[1], 0, pad[0]))
        size = (t + pad[0], h + pad[1], w + pad[2])
        shifted = any(shift)
        if shifted:
            x = torch.roll(x, shifts=[-s for s in shift], dims=(1, 2, 3))
        windows = _to_windows(x, win)
        n = windows.shape[1]
        heads, head_dim = self.num_heads, c // self.num_heads
        qkv = self.qkv(windows).view(-1, n, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0] * head_dim ** -0.5, qkv[1], qkv[2]
        attn = q @ k.transpose(-2, -1)  # (B * windows, heads, N, N)
        bias = self.relative_position_bias_table[self.relative_position_index[:n, :n]]
        attn = attn + bias.permute(2, 0, 1).unsqueeze(0)
        if shifted:
            mask = _shift_mask(size, win, shift, attn)
            attn = (attn.view(b, mask.shape[0], heads, n, n) + mask[None, :, None]).view(
                -1, heads, n, n)
        attn = F.dropout(attn.softmax(dim=-1), self.attention_dropout, self.training)
        out = (attn @ v).transpose(1, 2).reshape(-1, n, c)
        out = F.dropout(self.proj(out), self.dropout, self.training)
        x = _from_windows(out, win, b, *size)
        if shifted:
            x = torch.roll(x, shifts=list(shift), dims=(1, 2, 3))
        return x[:, :t, :h, :w].contiguous()


class SwinBlock3d(nn.Module):
    """Pre-norm transformer block: windowed attention, then an MLP, each a residual branch."""

    def __init__(self, dim: int, num_heads: int, window: Sequence[int], shift: Sequence[int],
                 mlp_ratio: float, dropout: float, attention_dropout: float,
                 drop_path: float) -> None:
        super().__init__()
        hidden = int(dim * mlp_ratio)
        self.norm1 = nn.LayerNorm(dim)
        self.attn = WindowAttention3d(dim, num_heads, window, shift, attention_dropout, dropout)
        # torchvision's module tree (and its module even at 0); imported here, not with this
        # module, for the reason drop_path_module gives (blockwise.py)
        from torchvision.ops import StochasticDepth

        self.stochastic_depth = StochasticDepth(drop_path, "row")
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, hidden), nn.GELU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, dim), nn.Dropout(dropout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.stochastic_depth(self.attn(self.norm1(x)))
        return x + self.stochastic_depth(self.mlp(self.norm2(x)))


class PatchMerging(nn.Module):
    """Halves H and W (zero-padding an odd size): the 2x2 neighbours (order (0,0), (1,0), (0,1),
    (1,1) in (h, w)) concatenated, normalised and projected from 4 dim to 2 dim."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
        self.norm = nn.LayerNorm(4 * dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2], x.shape[3]
        x = F.pad(x, (0, 0, 0, w % 2, 0, h % 2))
        x = torch.cat([x[:, :, 0::2, 0::2], x[:, :, 1::2, 0::2], x[:, :, 0::2, 1::2],
                       x[:, :, 1::2, 1::2]], dim=-1)
        return self.reduction(self.norm(x))


class PatchEmbed3d(nn.Module):
    """Non-overlapping ``patch`` cubes (the clip zero-padded at the end to whole patches), each
    projected to ``dim`` and normalised; returns channels-last ``(B, T', H', W', dim)``."""

    def __init__(self, patch: Sequence[int], in_channels: int, dim: int) -> None:
        super().__init__()
        self.patch = tuple(patch)
        self.proj = nn.Conv3d(in_channels, dim, kernel_size=self.patch, stride=self.patch)
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pad = [(-n) % p for n, p in zip(x.shape[2:], self.patch)]
        x = F.pad(x, (0, pad[2], 0, pad[1], 0, pad[0]))
        return self.norm(self.proj(x).permute(0, 2, 3, 4, 1))


class SwinTransformer3d(BlockwiseMixin, ClassifierMixin, nn.Module):
    """Video Swin Transformer (see the module docstring).

    Args:
        num_classes: Output classes.
        embed_dim: Width of stage 0 (doubled at each patch merging): 96 (T, S), 128 (B).
        depths: Blocks per stage.
        num_heads: Attention heads per stage.
        window_size: Attention window ``(Wt, Wh, Ww)`` in tokens.
        patch_size: Patch ``(t, h, w)`` in pixels.
        mlp_ratio: MLP width over block width.
        dropout: Dropout after the patch embedding, the attention projection and each MLP
            layer (torchvision's ``dropout``, MMAction2's ``drop_rate``).
        attention_dropout: Dropout of the attention weights.
        drop_path: Stochastic depth of the last block (0 at the first, linear in between);
            ``stochastic_depth_prob`` (torchvision's name) is accepted for it.
        head_dropout: Dropout before the classifier (MMAction2's ``I3DHead`` ``dropout_ratio``).
        in_channels: Input channels.
    """

    classifier_name = "head"
    head_init_std = 0.02

    def __init__(self, num_classes: int = 400, embed_dim: int = 96,
                 depths: Sequence[int] = (2, 2, 6, 2), num_heads: Sequence[int] = (3, 6, 12, 24),
                 window_size: Sequence[int] = (8, 7, 7), patch_size: Sequence[int] = (2, 4, 4),
                 mlp_ratio: float = 4.0, dropout: float = 0.0, attention_dropout: float = 0.0,
                 drop_path: float = 0.1, head_dropout: float = 0.5, in_channels: int = 3,
                 **kwargs: Any) -> None:
        super().__init__()
        if "stochastic_depth_prob" in kwargs:
            drop_path = kwargs.pop("stochastic_depth_prob")
        if kwargs:
            raise TypeError(f"SwinTransformer3d got unknown arguments: {sorted(kwargs)}")
        if len(depths) != len(num_heads):
            raise ValueError(f"depths {tuple(depths)} and num_heads {tuple(num_heads)} must have "
                             "one entry per stage")
        if len(window_size) != 3 or len(patch_size) != 3:
            raise ValueError(f"window_size {tuple(window_size)} and patch_size "
                             f"{tuple(patch_size)} must be (t, h, w)")
        self.depths = tuple(depths)
        self.patch_embed = PatchEmbed3d(patch_size, in_channels, embed_dim)
        self.pos_drop = nn.Dropout(dropout)
        total, index = sum(depths), 0
        shift = [k // 2 for k in window_size]
        layers: List[nn.Module] = []
        for stage, (depth, heads) in enumerate(zip(depths, num_heads)):
            dim = embed_dim * 2 ** stage
            blocks = []
            for j in range(depth):
                rate = drop_path * index / (total - 1) if total > 1 else 0.0
                blocks.append(SwinBlock3d(dim, heads, window_size,
                                          [0, 0, 0] if j % 2 == 0 else shift, mlp_ratio,
                                          dropout, attention_dropout, rate))
                index += 1
            layers.append(nn.Sequential(*blocks))
            if stage < len(depths) - 1:
                layers.append(PatchMerging(dim))
        self.features = nn.Sequential(*layers)
        self.num_features = embed_dim * 2 ** (len(depths) - 1)
        self.norm = nn.LayerNorm(self.num_features)
        self.head_drop = nn.Dropout(head_dropout)
        self.head = nn.Linear(self.num_features, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def no_weight_decay(self) -> List[str]:
        """Parameter names (last component) trained without weight decay: the relative position
        bias tables, as MMAction2's and the original Video Swin recipes exempt them."""
        return ["relative_position_bias_table"]

    def checkpoint_blocks(self) -> List[nn.Module]:
        return [block for stage in self.features[0::2] for block in stage]

    def layer_id(self, name: str) -> int:
        """Swin's fine-tuning rule (MMSelfSup's / SimMIM's): the patch embedding is layer 0,
        the blocks count 1.. over all stages, the patch merging after a stage shares its last
        block's layer, the rest (``norm``, ``head``) is the last layer."""
        if name.startswith("patch_embed."):
            return 0
        if name.startswith("features."):
            index = int(name.split(".")[1])
            stage = index // 2
            if index % 2 == 0:
                return sum(self.depths[:stage]) + int(name.split(".")[2]) + 1
            return sum(self.depths[:stage + 1])
        return sum(self.depths) + 1

    def num_layers(self) -> int:
        return sum(self.depths) + 2

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The normalised last-stage tokens, channels-last ``(B, T', H', W', C)``."""
        x = self.pos_drop(self.patch_embed(x))
        return self.norm(self.features(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        return self.head(self.head_drop(self.forward_features(x).mean(dim=(1, 2, 3))))


def _variant(size: str, embed_dim: int, depths: Tuple[int, ...], num_heads: Tuple[int, ...],
             drop_path: float, params: int, gflops: float, top1: float) -> None:
    """Register ``swin3d_{size}``: torchvision's ``swin3d_{size}`` architecture."""
    doc = f"""Video Swin-{size.upper()}: embed {embed_dim}, depths {depths}, heads {num_heads},
    patch 2x4x4, window 8x7x7; 32 frames at stride 2, 224x224 (torchvision's ``swin3d_{size}``).

    Args:
        num_classes: Output classes.
        **kwargs: :class:`SwinTransformer3d` arguments (``drop_path``, ``dropout``, ...).
    """
    facts = video_facts(32, 2, 224, _MEAN, _STD, params=params, gflops=gflops,
                        published_top1=top1)
    register_model(f"swin3d_{size}", SwinTransformer3d, facts, doc, embed_dim=embed_dim,
                   depths=depths, num_heads=num_heads, drop_path=drop_path)


# params at 400 classes equal torchvision's metadata; gflops: multiply-adds of one 32x224x224
# view counted by torch.utils.flop_counter (recounted in the tests); top-1: torchvision's weight
# metadata (Kinetics-400; the files are ported from the paper's). drop_path: the Video Swin
# recipe's (MMAction2's configs; torchvision's builders use 0.1 for all three).
_variant("t", 96, (2, 2, 6, 2), (3, 6, 12, 24), 0.1, 28_158_070, 87.76, 77.715)
_variant("s", 96, (2, 2, 18, 2), (3, 6, 12, 24), 0.2, 49_816_678, 165.68, 79.521)
_variant("b", 128, (2, 2, 18, 2), (4, 8, 16, 32), 0.3, 88_048_984, 281.33, 79.427)
