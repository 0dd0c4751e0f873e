"""torchvision checkpoints: a bare ``state_dict()`` of a torchvision model.

* zoo models whose keys already equal torchvision's (``resnet*``, ``tsn_resnet50``,
  ``r2plus1d_resnet18/34``, ``swin3d_t/s/b``, and the torchvision video adapters ``r3d_18``,
  ``mc3_18``, ``r2plus1d_18``, ``s3d``) take the tensors unchanged; conversion
  only checks that every key and shape fits.
* MViT (``mvit_v1_b``, ``mvit_v2_s`` -> zoo's ``mvit_*``): renamed to PySlowFast's names, class
  token and position tables reshaped (:mod:`zoo.models.weights.convert.mvit`).
* Single-pathway 3D ResNets (``i3d_resnet50``, ``slow_8x8_resnet50``) are **inflated** from a 2D
  ResNet with bottleneck blocks: ``conv1`` / ``bn1`` -> ``stem``, ``layer{n}.{j}.conv{1,2,3}`` /
  ``bn{1,2,3}`` -> ``res{n+1}.{j}.conv_{a,b,c}`` / ``bn_{a,b,c}``, ``downsample.{0,1}`` ->
  ``shortcut.{conv,bn}``, ``fc`` -> ``head.proj``. Each 2D kernel is repeated over the 3D kernel's
  temporal size and divided by it, so a static clip gives the 2D net's logits (exactly with
  ``temporal_pad="replicate"``; with zero padding the end frames differ slightly).

SlowFast has no 2D counterpart for its fast pathway and laterals, so it is not a target here.
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn

from ...classifier import head_keys
from . import mvit
from .common import PARAM, Layout, Scheme, map_state

_BLOCK = {"conv1": "conv_a", "bn1": "bn_a", "conv2": "conv_b", "bn2": "bn_b",
          "conv3": "conv_c", "bn3": "bn_c", "downsample.0": "shortcut.conv",
          "downsample.1": "shortcut.bn"}
_STEM = {"conv1": "stem.conv", "bn1": "stem.bn", "fc": "head.proj"}
_TOP = re.compile(rf"^(conv1|bn1|fc)\.{PARAM}$")
_LAYER = re.compile(rf"^layer([1-4])\.(\d+)\.(.+)\.{PARAM}$")


class TorchvisionScheme(Scheme):
    """torchvision -> zoo (same-key models unchanged; 2D ResNet -> 3D ResNet by inflation)."""

    name = "torchvision"
    kinds = ("other", "resnet3d", "mvit")
    state_keys = ("model", "state_dict")

    def mapper(self, source_keys: Sequence[str], layout: Layout) -> Callable[[str], Optional[str]]:
        if layout.kind == "other":
            return lambda key: key if key in layout.shapes else None
        if layout.kind == "mvit":
            return mvit.torchvision_key

        def to_zoo(key: str) -> Optional[str]:
            m = _TOP.match(key)
            if m:
                return f"{_STEM[m.group(1)]}.{m.group(2)}"
            m = _LAYER.match(key)
            if m and m.group(3) in _BLOCK:
                return f"res{int(m.group(1)) + 1}.{m.group(2)}.{_BLOCK[m.group(3)]}.{m.group(4)}"
            return None

        return to_zoo

    def transform(self, zoo_key: str, tensor: torch.Tensor, layout: Layout) -> torch.Tensor:
        target = layout.shapes[zoo_key]
        if layout.kind == "mvit":
            return mvit.reshape_tokens(zoo_key, tensor, target)
        if tensor.dim() == 4 and len(target) == 5:
            kt = target[2]  # (O, I, kh, kw) -> (O, I, kt, kh, kw), summing to the 2D kernel
            return (tensor.unsqueeze(2).repeat(1, 1, kt, 1, 1) / kt).contiguous()
        return tensor


def inflate_state_dict(model: nn.Module, state_2d: dict) -> dict:
    """The 3D state dict for ``model`` (a zoo ``ResNet3d``) inflated from a 2D ResNet's tensors.

    The head keeps the 2D class count; :func:`zoo.models.weights.load.load_state` skips it when
    it differs from the model's (:func:`zoo.models.weights.load.inflate_from_file` reads a file
    and loads it so).
    """
    shapes = {k: v.shape for k, v in model.state_dict().items()}
    layout = Layout.from_shapes(shapes, head_keys(model))
    state, _ = map_state(TorchvisionScheme(), state_2d, layout)
    return state
