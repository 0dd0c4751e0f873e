"""MViT keys of torchvision, PyTorchVideo and PySlowFast -> zoo's MViT (zoo/models/mvit.py, whose
names are PySlowFast's). The torchvision, pytorchvideo and pyslowfast schemes call these for a
model of kind ``"mvit"``.

torchvision (``torchvision.models.video.MViT``: ``mvit_v1_b``, ``mvit_v2_s``)::

    conv_proj                                   -> patch_embed.proj
    pos_encoding.class_token (C)                -> cls_token (1, 1, C)
    pos_encoding.{spatial,temporal,class}_pos   -> pos_embed_{spatial,temporal,class} (1, N, C)
    blocks.{i}.attn.project.0                   -> blocks.{i}.attn.proj
    blocks.{i}.attn.pool_{q,k,v}.pool           -> blocks.{i}.attn.pool_{q,k,v}
    blocks.{i}.attn.pool_{q,k,v}.norm_act.0     -> blocks.{i}.attn.norm_{q,k,v}
    blocks.{i}.mlp.0 / mlp.3                    -> blocks.{i}.mlp.fc1 / fc2
    blocks.{i}.project                          -> blocks.{i}.proj
    head.1                                      -> head.projection
    (norm1, norm2, attn.qkv, attn.rel_pos_*, norm: the same)

PyTorchVideo (``create_multiscale_vision_transformers``, hub ``mvit_base_16x4`` /
``mvit_base_32x3``)::

    patch_embed.patch_model                     -> patch_embed.proj
    cls_positional_encoding.{cls_token,pos_embed*}  -> cls_token, pos_embed*
    norm_patch_embed / norm_embed               -> norm_stem / norm
    head.proj                                   -> head.projection
    (blocks.*: the same names)

PySlowFast: zoo's names. Where the file has separate ``attn.q`` / ``attn.k`` / ``attn.v`` linears
(PyTorchVideo always, PySlowFast with MVIT.SEPARATE_QKV) and the model one ``attn.qkv`` (or the
reverse), they are concatenated (or split) in that order, which is how the fused layer's output
is read (q, then k, then v).

PyTorchVideo normalises pooled q / k / v with LayerNorm's default eps (1e-5); PySlowFast's
current code and zoo use 1e-6: logits differ by about 1.2e-4 of the largest (0.006 on 48.6 for
random weights at 16 x 224 x 224).
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Optional

import torch

__all__ = ["fuse_or_split_qkv", "is_mvit", "pyslowfast_key", "pytorchvideo_key",
           "reshape_tokens", "torchvision_key"]

_TOKENS = ("cls_token", "pos_embed", "pos_embed_spatial", "pos_embed_temporal",
           "pos_embed_class")
_TV_TOP = {"conv_proj": "patch_embed.proj", "head.1": "head.projection", "norm": "norm"}
_TV_POS = {"pos_encoding.class_token": "cls_token",
           "pos_encoding.spatial_pos": "pos_embed_spatial",
           "pos_encoding.temporal_pos": "pos_embed_temporal",
           "pos_encoding.class_pos": "pos_embed_class"}
_TV_BLOCK = [
    (re.compile(r"^attn\.project\.0\.(.+)$"), r"attn.proj.\1"),
    (re.compile(r"^attn\.pool_([qkv])\.pool\.(.+)$"), r"attn.pool_\1.\2"),
    (re.compile(r"^attn\.pool_([qkv])\.norm_act\.0\.(.+)$"), r"attn.norm_\1.\2"),
    (re.compile(r"^mlp\.0\.(.+)$"), r"mlp.fc1.\1"),
    (re.compile(r"^mlp\.3\.(.+)$"), r"mlp.fc2.\1"),
    (re.compile(r"^project\.(.+)$"), r"proj.\1"),
    (re.compile(r"^(norm1|norm2|attn\.qkv|attn\.q|attn\.k|attn\.v)\.(.+)$"), r"\1.\2"),
    (re.compile(r"^attn\.(rel_pos_[hwt])$"), r"attn.\1"),
]
_PTV_TOP = {"patch_embed.patch_model": "patch_embed.proj", "norm_embed": "norm",
            "norm_patch_embed": "norm_stem", "head.proj": "head.projection"}
_BLOCK = re.compile(r"^blocks\.(\d+)\.(.+)$")
_QKV = re.compile(r"^(blocks\.\d+\.attn)\.(q|k|v|qkv)\.(weight|bias)$")


def is_mvit(shapes: Dict[str, torch.Size]) -> bool:
    """Whether a state dict's keys are zoo's MViT."""
    return "patch_embed.proj.weight" in shapes and "blocks.0.norm1.weight" in shapes


def _top(key: str, names: Dict[str, str]) -> Optional[str]:
    module, _, param = key.rpartition(".")
    return f"{names[module]}.{param}" if module in names else None


def torchvision_key(key: str) -> Optional[str]:
    """zoo's name of a torchvision MViT key (None: not an MViT key)."""
    if key in _TV_POS:
        return _TV_POS[key]
    m = _BLOCK.match(key)
    if m:
        for pattern, repl in _TV_BLOCK:
            if pattern.match(m.group(2)):
                return f"blocks.{m.group(1)}.{pattern.sub(repl, m.group(2))}"
        return None
    return _top(key, _TV_TOP)


def pytorchvideo_key(key: str) -> Optional[str]:
    """zoo's name of a PyTorchVideo MViT key."""
    if key.startswith("cls_positional_encoding."):
        name = key[len("cls_positional_encoding."):]
        return name if name in _TOKENS else None
    if _BLOCK.match(key):
        return key
    return _top(key, _PTV_TOP)


def pyslowfast_key(key: str) -> Optional[str]:
    """zoo's name of a PySlowFast MViT key (the same)."""
    return key


def reshape_tokens(zoo_key: str, tensor: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """A class token or position table in the model's shape (torchvision keeps them without
    the leading batch dimensions)."""
    if zoo_key in _TOKENS and tensor.shape != shape and tensor.numel() == shape.numel():
        return tensor.reshape(shape)
    return tensor


def fuse_or_split_qkv(source: Dict[str, torch.Tensor], to_zoo: Callable[[str], Optional[str]],
                      shapes: Dict[str, torch.Size]) -> Dict[str, torch.Tensor]:
    """``source`` with separate q / k / v linears concatenated into ``qkv`` where the model has a
    fused one, and a fused ``qkv`` split where the model has three (keys keep the source's
    naming)."""
    out = dict(source)
    groups: Dict[str, Dict[str, str]] = {}
    for key in source:
        zoo_key = to_zoo(key)
        m = _QKV.match(zoo_key or "")
        if m:
            groups.setdefault(f"{m.group(1)}|{m.group(3)}", {})[m.group(2)] = key
    for group, parts in groups.items():
        attn, param = group.split("|")
        if set(parts) == {"q", "k", "v"} and f"{attn}.qkv.{param}" in shapes:
            fused = torch.cat([out.pop(parts[n]) for n in ("q", "k", "v")], dim=0)
            out[parts["q"].replace(".q.", ".qkv.")] = fused
        elif set(parts) == {"qkv"} and f"{attn}.q.{param}" in shapes:
            for name, piece in zip("qkv", out.pop(parts["qkv"]).chunk(3, dim=0)):
                out[parts["qkv"].replace(".qkv.", f".{name}.")] = piece.contiguous()
    return out
