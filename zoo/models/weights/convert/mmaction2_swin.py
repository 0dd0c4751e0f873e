"""MMAction2's Video Swin checkpoints (``SwinTransformer3D`` backbone + ``I3DHead``), and the
original Video-Swin-Transformer repository's (the same layout) -> zoo's ``swin3d_*``.

Key scheme (``N`` = stage 0..3, ``M`` = block; the patch merging after stage N is MMAction2's
``layers.N.downsample``, zoo's (= torchvision's) ``features.{2N+1}``)::

    backbone.patch_embed.{proj,norm}                   -> patch_embed.{proj,norm}
    backbone.layers.N.blocks.M.{norm1,norm2}           -> features.{2N}.M.{norm1,norm2}
    backbone.layers.N.blocks.M.attn.{qkv,proj}         -> features.{2N}.M.attn.{qkv,proj}
    backbone.layers.N.blocks.M.attn.relative_position_bias_table / _index
                                                       -> features.{2N}.M.attn.(same)
    backbone.layers.N.blocks.M.mlp.{fc1,fc2}           -> features.{2N}.M.mlp.{0,3}
    backbone.layers.N.downsample.{reduction,norm}      -> features.{2N+1}.{reduction,norm}
    backbone.norm3 (MMAction2) / backbone.norm (original repository)  -> norm
    cls_head.fc_cls                                    -> head

The tensors keep their shapes and layouts (qkv rows are q, k, v, each head after head, in both).
A file without the ``relative_position_index`` buffers gets them computed from the window, read
off the bias table's and the index's shapes. Computation matches too: both publishers pad, shift
and mask the windows the same way, so the logits are MMAction2's (checked in tests/test_swin3d.py
against torchvision's implementation under MMAction2's names).
"""

from __future__ import annotations

import itertools
import re
from typing import Callable, Optional, Tuple

import torch

from ...swin3d import relative_position_index
from .common import Layout, Scheme

__all__ = ["MMAction2SwinScheme", "is_swin3d"]

_TENSOR = r"(weight|bias|relative_position_bias_table|relative_position_index)"
_BLOCK = re.compile(rf"^backbone\.layers\.(\d+)\.blocks\.(\d+)\.(.+?)\.{_TENSOR}$")
_MERGE = re.compile(rf"^backbone\.layers\.(\d+)\.downsample\.(reduction|norm)\.{_TENSOR}$")
_TOP = re.compile(rf"^(backbone\.patch_embed\.proj|backbone\.patch_embed\.norm|backbone\.norm3?"
                  rf"|cls_head\.fc_cls)\.{_TENSOR}$")
_TOP_NAMES = {"backbone.patch_embed.proj": "patch_embed.proj",
              "backbone.patch_embed.norm": "patch_embed.norm", "backbone.norm": "norm",
              "backbone.norm3": "norm", "cls_head.fc_cls": "head"}
_BLOCK_PARTS = {"norm1": "norm1", "norm2": "norm2", "attn.qkv": "attn.qkv",
                "attn.proj": "attn.proj", "attn": "attn", "mlp.fc1": "mlp.0", "mlp.fc2": "mlp.3"}


def is_swin3d(layout: Layout) -> bool:
    """Whether ``layout`` is zoo's Video Swin Transformer (torchvision's key names)."""
    return ("patch_embed.proj.weight" in layout.shapes
            and "features.0.0.attn.relative_position_bias_table" in layout.shapes)


def _window(index_size: int, table_size: int) -> Optional[Tuple[int, int, int]]:
    """The window ``(Wt, Wh, Ww)`` with ``Wt*Wh*Ww = index_size`` tokens and a bias table of
    ``(2Wt-1)(2Wh-1)(2Ww-1) = table_size`` rows, square in space; None unless exactly one fits."""
    fits = [(t, h, h) for t, h in itertools.product(range(1, index_size + 1), repeat=2)
            if t * h * h == index_size and (2 * t - 1) * (2 * h - 1) ** 2 == table_size]
    return fits[0] if len(fits) == 1 else None


class MMAction2SwinScheme(Scheme):
    """MMAction2 / Video-Swin-Transformer -> zoo ``swin3d_*`` (reached through the
    ``mmaction2`` scheme, which hands Swin targets to this one)."""

    name = "mmaction2"
    kinds = ("other",)
    state_keys = ("state_dict", "model", "model_state")

    def mapper(self, source_keys, layout: Layout) -> Callable[[str], Optional[str]]:
        def to_zoo(key: str) -> Optional[str]:
            m = _BLOCK.match(key)
            if m and m.group(3) in _BLOCK_PARTS:
                stage, block, part, tensor = m.groups()
                if tensor.startswith("relative_position") != (part == "attn"):
                    return None
                return f"features.{2 * int(stage)}.{block}.{_BLOCK_PARTS[part]}.{tensor}"
            m = _MERGE.match(key)
            if m and m.group(3) in ("weight", "bias"):
                return f"features.{2 * int(m.group(1)) + 1}.{m.group(2)}.{m.group(3)}"
            m = _TOP.match(key)
            if m and m.group(2) in ("weight", "bias"):
                return f"{_TOP_NAMES[m.group(1)]}.{m.group(2)}"
            return None

        return to_zoo

    def fill(self, zoo_key: str, layout: Layout) -> Optional[Tuple[torch.Tensor, str]]:
        if not zoo_key.endswith(".relative_position_index"):
            return None
        table = zoo_key.replace("_index", "_bias_table")
        window = _window(layout.shapes[zoo_key][0], layout.shapes[table][0])
        if window is None:
            return None
        return relative_position_index(window), "computed from the window (not in the file)"
