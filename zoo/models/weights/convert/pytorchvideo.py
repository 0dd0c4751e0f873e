"""PyTorchVideo checkpoints (``torch.hub`` ``slowfast_r50`` / ``slowfast_r101`` / ``slow_r50`` /
``i3d_r50`` / ``r2plus1d_r50`` ..., or ``model.state_dict()`` of ``create_slowfast`` /
``create_resnet`` / ``create_r2plus1d``).

Key scheme (``p`` = pathway, 0 slow and 1 fast; ``i`` = position in ``blocks``)::

    blocks.0.multipathway_blocks.{p}.{conv,norm}           -> {slow_,fast_}stem.{conv,bn}
    blocks.{i}.multipathway_fusion.{conv_fast_to_slow,norm} -> fuse_{stem,res2,res3,res4}.{conv,bn}
    blocks.{i}.multipathway_blocks.{p}.res_blocks.{j}.X    -> {..}res{i+1}.{j}.Y
    blocks.0.{conv,norm}                  (single pathway) -> stem.{conv,bn}
    blocks.{i}.res_blocks.{j}.X           (single pathway) -> res{2..5}.{j}.Y, in order of i
    blocks.{last}.proj                                      -> head.proj

with X -> Y: ``branch1_conv`` -> ``shortcut.conv``, ``branch1_norm`` -> ``shortcut.bn``,
``branch2.conv_{a,b,c}`` -> ``conv_{a,b,c}``, ``branch2.norm_{a,b,c}`` -> ``bn_{a,b,c}``. A
single-pathway I3D has its temporal max-pool as a block of its own, hence "in order of i".

R(2+1)D (``create_r2plus1d``, hub ``r2plus1d_r50``) is single pathway; its conv b is a (2+1)D
conv: ``branch2.conv_b.{conv_t,norm,conv_xy}`` -> ``conv_b.{conv_t,bn,conv_xy}``.

X3D (``create_x3d``, the ``x3d_xs`` / ``x3d_s`` / ``x3d_m`` / ``x3d_l`` hub models)::

    blocks.0.conv.conv_t / conv_xy / blocks.0.norm  -> stem.conv_xy / conv_t / bn  (its names
                                                       are swapped: conv_t is the 1x3x3 conv)
    branch2.norm_b.0 / norm_b.1.block.{0,2}         -> bn_b / se.fc{1,2}
    blocks.5.pool.{pre_conv,pre_norm,post_conv}     -> head.{conv_5,bn_5,lin_5}

MViT (``create_multiscale_vision_transformers``; hub ``mvit_base_16x4``): see
:mod:`zoo.models.weights.convert.mvit` (its separate q / k / v are fused into zoo's ``qkv``).

PyTorchVideo's X3D has no BN after stage 2's shortcut conv (PySlowFast's and zoo's default X3D
have one): its files convert to the X3D built with ``shortcut_bn="width_change"``
(``MODEL.KWARGS ['shortcut_bn', 'width_change']``, ``--kwargs shortcut_bn width_change``), which
is PyTorchVideo's network in eval and train mode alike. Given to the default X3D they are refused
with one line naming that kwarg (no BN is filled: in train mode it would normalise with batch
statistics, and train).

The architectures are the same (PyTorchVideo's ``create_slowfast`` reproduces PySlowFast), so the
logits agree up to float rounding; PyTorchVideo's head projects every position then averages,
which equals zoo's average-then-project.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Optional, Sequence

import torch

from . import mvit
from .common import PARAM, Layout, Scheme, check_x3d_shortcut_bns

_BLOCK = {
    "branch1_conv": "shortcut.conv", "branch1_norm": "shortcut.bn",
    "branch2.conv_a": "conv_a", "branch2.norm_a": "bn_a",
    "branch2.conv_b": "conv_b", "branch2.norm_b": "bn_b",
    "branch2.conv_c": "conv_c", "branch2.norm_c": "bn_c",
}
_R2PLUS1D_BLOCK = {"branch2.conv_b.conv_t": "conv_b.conv_t", "branch2.conv_b.norm": "conv_b.bn",
                   "branch2.conv_b.conv_xy": "conv_b.conv_xy"}
_NORM = {"conv": "conv", "norm": "bn", "conv_fast_to_slow": "conv"}

_MP_STEM = re.compile(rf"^blocks\.0\.multipathway_blocks\.(\d)\.(conv|norm)\.{PARAM}$")
_MP_FUSE = re.compile(rf"^blocks\.(\d+)\.multipathway_fusion\.(conv_fast_to_slow|norm)\.{PARAM}$")
_MP_RES = re.compile(
    rf"^blocks\.(\d+)\.multipathway_blocks\.(\d)\.res_blocks\.(\d+)\.(.+)\.{PARAM}$")
_SP_STEM = re.compile(rf"^blocks\.0\.(conv|norm)\.{PARAM}$")
_SP_RES = re.compile(rf"^blocks\.(\d+)\.res_blocks\.(\d+)\.(.+)\.{PARAM}$")
_HEAD = re.compile(rf"^blocks\.(\d+)\.proj\.{PARAM}$")
_X3D_STEM = re.compile(rf"^blocks\.0\.conv\.(conv_t|conv_xy)\.{PARAM}$")
_X3D_STEM_NAMES = {"conv_t": "conv_xy", "conv_xy": "conv_t"}  # PyTorchVideo's are swapped
_X3D_BLOCK = {"branch2.norm_b.0": "bn_b", "branch2.norm_b.1.block.0": "se.fc1",
              "branch2.norm_b.1.block.2": "se.fc2"}
_X3D_HEAD = re.compile(rf"^blocks\.\d+\.pool\.(pre_conv|pre_norm|post_conv)\.{PARAM}$")
_X3D_HEAD_NAMES = {"pre_conv": "conv_5", "pre_norm": "bn_5", "post_conv": "lin_5"}
_FUSE_NAMES = ("fuse_stem", "fuse_res2", "fuse_res3", "fuse_res4")


class PyTorchVideoScheme(Scheme):
    """PyTorchVideo -> zoo (SlowFast, Slow, I3D, R(2+1)D, X3D, MViT)."""

    name = "pytorchvideo"
    kinds = ("slowfast", "resnet3d", "x3d", "mvit")

    def prepare(self, source: Dict[str, torch.Tensor], layout: Layout
                ) -> Dict[str, torch.Tensor]:
        if layout.kind == "mvit":
            return mvit.fuse_or_split_qkv(source, mvit.pytorchvideo_key, layout.shapes)
        if layout.kind == "x3d":
            to_zoo = self.mapper(list(source), layout)
            check_x3d_shortcut_bns(self.name, [to_zoo(key) for key in source], layout)
        return source

    def mapper(self, source_keys: Sequence[str], layout: Layout) -> Callable[[str], Optional[str]]:
        if layout.kind == "mvit":
            return mvit.pytorchvideo_key
        # Single pathway: the blocks holding res_blocks are res2..res5 in order.
        stage_blocks = sorted({int(m.group(1)) for m in map(_SP_RES.match, source_keys) if m})
        stage_of = {b: f"res{n + 2}" for n, b in enumerate(stage_blocks)}
        block = {**_BLOCK, **(_X3D_BLOCK if layout.kind == "x3d" else _R2PLUS1D_BLOCK)}

        def to_zoo(key: str) -> Optional[str]:
            m = _MP_STEM.match(key)
            if m:
                prefix = layout.prefix(int(m.group(1)))
                return None if prefix is None else f"{prefix}stem.{_NORM[m.group(2)]}.{m.group(3)}"
            m = _MP_FUSE.match(key)
            if m and int(m.group(1)) < len(_FUSE_NAMES):
                return f"{_FUSE_NAMES[int(m.group(1))]}.{_NORM[m.group(2)]}.{m.group(3)}"
            m = _MP_RES.match(key)
            if m and m.group(4) in _BLOCK:
                prefix = layout.prefix(int(m.group(2)))
                if prefix is None:
                    return None
                stage = int(m.group(1)) + 1
                return f"{prefix}res{stage}.{m.group(3)}.{_BLOCK[m.group(4)]}.{m.group(5)}"
            single = layout.kind in ("resnet3d", "x3d")
            m = _SP_STEM.match(key)
            if m and single:
                return f"stem.{_NORM[m.group(1)]}.{m.group(2)}"
            m = _SP_RES.match(key)
            if m and m.group(3) in block and single:
                return f"{stage_of[int(m.group(1))]}.{m.group(2)}.{block[m.group(3)]}.{m.group(4)}"
            m = _X3D_STEM.match(key)
            if m and layout.kind == "x3d":
                return f"stem.{_X3D_STEM_NAMES[m.group(1)]}.{m.group(2)}"
            m = _X3D_HEAD.match(key)
            if m and layout.kind == "x3d":
                return f"head.{_X3D_HEAD_NAMES[m.group(1)]}.{m.group(2)}"
            m = _HEAD.match(key)
            return f"head.proj.{m.group(2)}" if m else None

        return to_zoo
