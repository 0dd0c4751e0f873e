"""VideoMAE (Tong et al., NeurIPS 2022): the fine-tuning ViT of masked-autoencoder pre-trained
video transformers.

Layer for layer VideoMAE's ``VisionTransformer`` (``modeling_finetune.py``), which Hugging
Face's ``VideoMAEForVideoClassification`` and MMAction2's ``VisionTransformer``
(``vit_mae.py``) reproduce under other key names. The clip is cut into tubelets of ``tubelet``
frames x ``patch`` x ``patch`` pixels (a strided Conv3d), a FIXED sine-cosine table is added
(a buffer, not a parameter: no state-dict entry, as in Hugging Face's and MMAction2's files),
then pre-norm transformer blocks whose attention has q and v biases but none on k. The tokens
are mean-pooled, normalised by ``fc_norm`` and classified (no final ``norm`` then).

Module tree (``i`` = block)::

    patch_embed.proj      Conv3d (tubelet x patch x patch, stride the same): 3 -> embed_dim
    pos_embed             sine-cosine table, one row per token (buffer; not saved)
    blocks.{i}.norm1      LayerNorm
    blocks.{i}.attn.qkv   Linear embed_dim -> 3 x embed_dim, no bias; attn.q_bias, attn.v_bias
    blocks.{i}.attn.proj  Linear embed_dim -> embed_dim
    blocks.{i}.norm2      LayerNorm
    blocks.{i}.mlp.fc1/2  Linear embed_dim -> mlp_ratio x embed_dim, GELU, Linear back
    fc_norm               LayerNorm of the mean token (``norm`` instead, on token 0, when
                          ``use_mean_pooling`` is False)
    head                  Linear embed_dim -> classes

These are the keys of VideoMAE's own fine-tuned checkpoints. The table is a function of the
token index only (tokens ordered time, then rows, then columns), so a clip of another size than
the model was built for gets the table a model built for that size would have (VideoMAE's own
code builds it from the configured size; Hugging Face refuses other sizes).

Input ``(B, C, T, H, W)`` as every zoo video model (Hugging Face takes ``(B, T, C, H, W)``);
returns logits. The blocks are a plain ``blocks`` ModuleList (layer-wise LR decay indexes it).
"""

from __future__ import annotations

from typing import List, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from .blockwise import BlockwiseMixin, drop_path_module
from .classifier import ClassifierMixin
from .facts import IMAGENET_MEAN, IMAGENET_STD, video_facts
from .registry import register_model

__all__ = ["VideoMAE", "sincos_table"]


def sincos_table(num_tokens: int, dim: int) -> torch.Tensor:
    """The fixed position table ``(1, num_tokens, dim)``: channel ``2j`` is
    ``sin(n / 10000^(2j/dim))`` and channel ``2j+1`` the cosine of the same angle, for token
    ``n``; computed in float64 and stored in float32, as VideoMAE does."""
    pair = torch.arange(dim, dtype=torch.float64, device="cpu") // 2 * 2
    tokens = torch.arange(num_tokens, dtype=torch.float64, device="cpu")
    angles = tokens.unsqueeze(1) / torch.pow(10000.0, pair / dim).unsqueeze(0)
    table = torch.empty_like(angles)
    table[:, 0::2] = torch.sin(angles[:, 0::2])
    table[:, 1::2] = torch.cos(angles[:, 1::2])
    return table.to(torch.float32).unsqueeze(0)


class Attention(nn.Module):
    """Multi-head self-attention with learned q and v biases (k has none)."""

    def __init__(self, dim: int, num_heads: int, qv_bias: bool = True, attn_drop: float = 0.0,
                 proj_drop: float = 0.0) -> None:
        super().__init__()
        if dim % num_heads:
            raise ValueError(f"embed_dim {dim} is not a multiple of num_heads {num_heads}")
        self.num_heads = num_heads
        self.qkv = nn.Linear(dim, dim * 3, bias=False)
        if qv_bias:
            self.q_bias = nn.Parameter(torch.zeros(dim))
            self.v_bias = nn.Parameter(torch.zeros(dim))
        else:
            self.q_bias = self.v_bias = None
        self.attn_drop = attn_drop
        self.proj = nn.Linear(dim, dim)
        self.proj_drop = nn.Dropout(proj_drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, c = x.shape
        bias = None
        if self.q_bias is not None:
            bias = torch.cat((self.q_bias, torch.zeros_like(self.v_bias), self.v_bias))
        qkv = F.linear(x, self.qkv.weight, bias)
        q, k, v = qkv.reshape(b, n, 3, self.num_heads, c // self.num_heads).permute(
            2, 0, 3, 1, 4).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v,
                                           dropout_p=self.attn_drop if self.training else 0.0)
        return self.proj_drop(self.proj(x.transpose(1, 2).reshape(b, n, c)))


class Mlp(nn.Module):
    """Linear, GELU, Linear (dropout after each)."""

    def __init__(self, dim: int, hidden: int, drop: float = 0.0) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(drop)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(self.fc2(self.drop(F.gelu(self.fc1(x)))))


class Block(nn.Module):
    """Pre-norm transformer block: ``x + attn(norm1(x))``, then ``x + mlp(norm2(x))``."""

    def __init__(self, dim: int, num_heads: int, mlp_ratio: float, qv_bias: bool,
                 drop_path: float, dropout: float, attn_dropout: float, norm_eps: float) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=norm_eps)
        self.attn = Attention(dim, num_heads, qv_bias, attn_dropout, dropout)
        self.norm2 = nn.LayerNorm(dim, eps=norm_eps)
        self.mlp = Mlp(dim, int(dim * mlp_ratio), dropout)
        self.drop_path = drop_path_module(drop_path)  # no state-dict entries

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop_path(self.attn(self.norm1(x)))
        return x + self.drop_path(self.mlp(self.norm2(x)))


class PatchEmbed(nn.Module):
    """Tubelets of ``tubelet x patch x patch`` pixels to tokens ``(B, N, dim)``."""

    def __init__(self, in_channels: int, dim: int, tubelet: int, patch: int) -> None:
        super().__init__()
        size = (tubelet, patch, patch)
        self.proj = nn.Conv3d(in_channels, dim, size, stride=size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x).flatten(2).transpose(1, 2)


class VideoMAE(BlockwiseMixin, ClassifierMixin, nn.Module):
    """VideoMAE's fine-tuning ViT (see the module docstring).

    Args:
        num_classes: Output classes.
        embed_dim: Token width (384 S, 768 B, 1024 L).
        depth: Transformer blocks (12 S/B, 24 L).
        num_heads: Attention heads (6 S, 12 B, 16 L).
        mlp_ratio: MLP hidden width over ``embed_dim`` (4).
        frames: Input frames the model is built for (16); with ``crop_size``, the size of the
            ``pos_embed`` buffer.
        crop_size: Input side (224).
        tubelet: Frames per token (2).
        patch: Pixels per token side (16).
        qv_bias: Learned q and v biases (VideoMAE's ``qkv_bias``).
        use_mean_pooling: Mean of the tokens then ``fc_norm`` (True, the fine-tuned models);
            False: ``norm`` of every token, then token 0.
        drop_path: Stochastic depth of the last block, rising linearly from 0 at the first
            (VideoMAE fine-tunes B with 0.1, L with 0.2).
        dropout: Dropout after the MLP and attention projections (VideoMAE's ``drop_rate``).
        attn_dropout: Dropout of the attention weights.
        head_dropout: Dropout before the head (VideoMAE's ``fc_drop_rate``).
        norm_eps: LayerNorm epsilon (VideoMAE's and MMAction2's 1e-6; Hugging Face's config
            says 1e-12 for the blocks and its ``fc_norm`` uses 1e-5: the logits differ by far
            less than float32 rounding of a trained model's features).
        init_scale: The head's initial weights are scaled by this (VideoMAE's fine-tuning
            ``--init_scale 0.001``); also the std (x 0.02) of a head made by
            ``reset_classifier``.
        in_channels: Input channels.
    """

    classifier_name = "head"

    # Position tables of one (frames, crop): the trainer refuses CONFIG.TRAIN.MULTIGRID.
    fixed_input_shape = True

    def __init__(self, num_classes: int = 400, embed_dim: int = 768, depth: int = 12,
                 num_heads: int = 12, mlp_ratio: float = 4.0, frames: int = 16,
                 crop_size: int = 224, tubelet: int = 2, patch: int = 16, qv_bias: bool = True,
                 use_mean_pooling: bool = True, drop_path: float = 0.0, dropout: float = 0.0,
                 attn_dropout: float = 0.0, head_dropout: float = 0.0, norm_eps: float = 1e-6,
                 init_scale: float = 0.001, in_channels: int = 3) -> None:
        super().__init__()
        self.embed_dim, self.tubelet, self.patch = embed_dim, tubelet, patch
        self.frames, self.crop_size = frames, crop_size
        self.qv_bias, self.use_mean_pooling = qv_bias, use_mean_pooling
        self.head_init_std = 0.02 * init_scale
        self.patch_embed = PatchEmbed(in_channels, embed_dim, tubelet, patch)
        table = sincos_table(self._num_tokens(frames, crop_size, crop_size), embed_dim)
        self.register_buffer("pos_embed", table.to(self.patch_embed.proj.weight.device),
                             persistent=False)
        self.pos_drop = nn.Dropout(dropout)
        rates = [drop_path * i / max(depth - 1, 1) for i in range(depth)]
        self.blocks = nn.ModuleList([
            Block(embed_dim, num_heads, mlp_ratio, qv_bias, rates[i], dropout, attn_dropout,
                  norm_eps) for i in range(depth)])
        if use_mean_pooling:
            self.fc_norm = nn.LayerNorm(embed_dim, eps=norm_eps)
        else:
            self.norm = nn.LayerNorm(embed_dim, eps=norm_eps)
        self.head_drop = nn.Dropout(head_dropout)
        self.head = nn.Linear(embed_dim, num_classes)
        self._init_weights(init_scale)

    def _init_weights(self, init_scale: float) -> None:
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.trunc_normal_(m.weight, std=0.02)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)
            elif isinstance(m, nn.LayerNorm):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)
        with torch.no_grad():
            self.head.weight.mul_(init_scale)

    def checkpoint_blocks(self) -> List[nn.Module]:
        return list(self.blocks)

    def layer_id(self, name: str) -> int:
        """VideoMAE's fine-tuning rule: the patch embedding is layer 0, ``blocks.i`` is i + 1,
        the rest (``fc_norm`` / ``norm``, ``head``) depth + 1."""
        if name.startswith("patch_embed.") or name in ("pos_embed", "cls_token"):
            return 0
        if name.startswith("blocks."):
            return int(name.split(".")[1]) + 1
        return len(self.blocks) + 1

    def num_layers(self) -> int:
        return len(self.blocks) + 2

    def _num_tokens(self, frames: int, height: int, width: int) -> int:
        return (frames // self.tubelet) * (height // self.patch) * (width // self.patch)

    def position_table(self, num_tokens: int, like: torch.Tensor) -> torch.Tensor:
        """The ``pos_embed`` buffer, or (for a clip of another size) the table of that many
        tokens, in ``like``'s dtype and device."""
        table = self.pos_embed
        if table.shape[1] != num_tokens:
            table = sincos_table(num_tokens, self.embed_dim)
        return table.to(device=like.device, dtype=like.dtype)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """The pooled, normalised features ``(B, embed_dim)`` of a clip ``(B, C, T, H, W)``."""
        x = self.patch_embed(x)
        x = self.pos_drop(x + self.position_table(x.shape[1], x))
        for block in self.blocks:
            x = block(x)
        if self.use_mean_pooling:
            return self.fc_norm(x.mean(1))
        return self.norm(x)[:, 0]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits ``(B, num_classes)`` of a clip ``(B, C, T, H, W)``."""
        if x.dim() != 5:
            raise ValueError(f"expected a (B, C, T, H, W) clip, got shape {tuple(x.shape)}")
        t, h, w = x.shape[2:]
        if t < self.tubelet or h < self.patch or w < self.patch:
            raise ValueError(f"a clip of {t} frames {h}x{w} holds no {self.tubelet}x{self.patch}"
                             f"x{self.patch} tubelet")
        return self.head(self.head_drop(self.forward_features(x)))


def _variant(size: str, embed_dim: int, depth: int, num_heads: int, params: int,
             gflops: float, top1: Optional[float]) -> None:
    """Register ``videomae_vit_{size}`` (lower case): VideoMAE's ViT-{size}, 16 frames."""
    doc = f"""VideoMAE ViT-{size}: width {embed_dim}, {depth} blocks, {num_heads} heads; 16 frames
    at stride 4, 224x224, tubelet 2, patch 16 (VideoMAE's ``vit_{size.lower()}_patch16_224``
    fine-tuning model).

    Args:
        num_classes: Output classes.
        **kwargs: :class:`VideoMAE` arguments (``drop_path``, ``embed_dim``, ``depth``,
            ``frames``, ``crop_size``, ...).
    """
    facts = video_facts(16, 4, 224, IMAGENET_MEAN, IMAGENET_STD, params=params, gflops=gflops,
                        published_top1=top1)
    register_model(f"videomae_vit_{size.lower()}", VideoMAE, facts, doc, embed_dim=embed_dim,
                   depth=depth, num_heads=num_heads)


# Params at 400 classes equal Hugging Face's VideoMAEForVideoClassification of the same config
# (counted in the tests); gflops: multiply-adds of one 16x224x224 view (torch.utils.flop_counter,
# attention included; recounted in the tests); top-1: VideoMAE's MODEL_ZOO.md (Kinetics-400,
# 16 frames x 5 clips x 3 crops), the checkpoints the Hub's MCG-NJU files were converted from.
_variant("S", 384, 12, 6, 22_033_936, 56.88, 79.0)
_variant("B", 768, 12, 12, 86_534_800, 180.34, 81.5)
_variant("L", 1024, 24, 16, 304_270_736, 596.83, 85.2)
