"""MViT position tables of weights trained at another clip size, resized to the model's.

An MViT is built for one clip (``frames`` x ``crop_size``); its position tables are sized by that
clip's token grid. Weights published at 16 x 224 therefore do not fit a model built for 32 frames
or 312 px as they are. PySlowFast (and torchvision for the relative tables) resizes such tables at
run time; zoo resizes them once, when the weights are loaded, the same way:

* relative positions ``rel_pos_h`` / ``rel_pos_w`` / ``rel_pos_t`` (MViTv2): linearly, to the
  model's rows (PySlowFast's ``get_rel_pos``, torchvision's ``_interpolate``);
* separate absolute tables (MViTv1): ``pos_embed_temporal`` linearly over T,
  ``pos_embed_spatial`` bilinearly over H x W, which is what PySlowFast's trilinear resize of
  their sum gives (its ``_get_pos_embed``);
* one absolute table ``pos_embed``: trilinearly over T x H x W, the class token's row kept. Its
  grid is read from its length, keeping either the model's frames or its square crop; a length
  both readings fit is refused (:class:`~zoo.models.mvit.MViTConfigError`).

The loaders (:mod:`zoo.models.weights.load`, ``zoo-convert-checkpoint``) call the model's
``resize_position_tensor`` for a tensor whose shape differs from the model's.
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .mvit_layers import MViTConfigError, resize_table

__all__ = ["PositionResizeMixin", "resize_mvit_position"]

_RELATIVE = ("rel_pos_h", "rel_pos_w", "rel_pos_t")


def _grid(table: torch.Tensor, grid: Sequence[int], size: Sequence[int], mode: str
          ) -> torch.Tensor:
    """A ``(1, prod(grid), C)`` table laid out over ``grid``, resized to ``size``."""
    c = table.shape[-1]
    x = table.reshape(1, *grid, c).movedim(-1, 1).float()
    x = F.interpolate(x, size=tuple(size), mode=mode)
    return x.movedim(1, -1).reshape(1, math.prod(size), c).to(table.dtype)


def _square(n: int) -> Optional[int]:
    side = math.isqrt(n)
    return side if side * side == n else None


def _source_grid(key: str, tokens: int, dims: List[int]) -> List[int]:
    """The (T, H, W) grid of a joint table of ``tokens`` patch rows, for a model of grid
    ``dims``: the model's frames with a square crop, or its crop with other frames."""
    t, h, w = dims
    readings = []
    side = _square(tokens // t) if tokens % t == 0 else None
    if side is not None:
        readings.append([t, side, side])
    if tokens % (h * w) == 0:
        readings.append([tokens // (h * w), h, w])
    unique = [list(g) for g in {tuple(g) for g in readings}]
    if len(unique) == 1:
        return unique[0]
    what = (f"both {unique[0]} and {unique[1]}" if unique else
            "no grid with the model's frames or crop")
    raise MViTConfigError(
        f"{key}: its {tokens} positions fit {what} (T, H, W); the model's is {dims}: build the "
        "model for the clip the weights were trained at (MODEL.KWARGS frames / crop_size), "
        "then change one of them at a time")


def resize_mvit_position(model: nn.Module, key: str, tensor: torch.Tensor
                         ) -> Optional[torch.Tensor]:
    """``tensor``, the position table ``key`` of weights trained at another clip size, resized to
    ``model``'s (an MViT with ``patch_dims``); None when ``key`` is no such table or its width
    differs (then the shape check names it).

    Raises:
        MViTConfigError: for a joint ``pos_embed`` whose grid its length cannot tell.
    """
    name = key.rsplit(".", 1)[-1]
    try:
        own = model.get_parameter(key)
    except AttributeError:
        return None
    if tensor.shape[-1] != own.shape[-1] or tensor.dim() not in (own.dim(), own.dim() - 1):
        return None
    if tensor.dim() == own.dim() - 1:
        tensor = tensor.unsqueeze(0)  # torchvision keeps the absolute tables without a batch dim
    dims = list(model.patch_dims)
    if name in _RELATIVE:
        return resize_table(tensor, own.shape[0])
    if name == "pos_embed_temporal":
        return resize_table(tensor[0], dims[0]).unsqueeze(0)
    if name == "pos_embed_spatial":
        side = _square(tensor.shape[1])
        if side is None:
            raise MViTConfigError(f"{key}: {tensor.shape[1]} spatial positions are not a square "
                                  "grid; give weights of a square crop")
        return _grid(tensor, [side, side], dims[1:], "bilinear")
    if name == "pos_embed":
        cls = 1 if getattr(model, "cls_embed_on", False) else 0
        grid = _source_grid(key, tensor.shape[1] - cls, dims)
        patches = _grid(tensor[:, cls:], grid, dims, "trilinear")
        return torch.cat((tensor[:, :cls], patches), dim=1)
    return None


class PositionResizeMixin:
    """The loaders' hook for MViT-family models: position tables resized at load time."""

    def resize_position_tensor(self, key: str, tensor: torch.Tensor) -> Optional[torch.Tensor]:
        """``tensor``, position table ``key`` of weights trained at another clip size, resized
        to this model's (:func:`resize_mvit_position`); None for any other tensor."""
        return resize_mvit_position(self, key, tensor)
