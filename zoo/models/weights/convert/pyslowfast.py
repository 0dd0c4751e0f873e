"""PySlowFast checkpoints (``.pyth``: ``{epoch, model_state, optimizer_state, cfg}``).

Key scheme (``p`` = pathway, 0 slow and 1 fast; single-pathway nets such as Slow, I3D and C2D only
have pathway 0; ``n`` = stage 1..5, ``j`` = block)::

    s1.pathway{p}_stem.{conv,bn}                   -> {slow_,fast_,}stem.{conv,bn}
    s{n}_fuse.{conv_f2s,bn}            (n = 1..4)  -> fuse_{stem,res2,res3,res4}.{conv,bn}
    s{n}.pathway{p}_res{j}.branch1 / branch1_bn    -> {..}res{n}.{j}.shortcut.{conv,bn}
    s{n}.pathway{p}_res{j}.branch2.{a,b,c}         -> {..}res{n}.{j}.conv_{a,b,c}
    s{n}.pathway{p}_res{j}.branch2.{a,b,c}_bn      -> {..}res{n}.{j}.bn_{a,b,c}
    head.projection                                -> head.proj

X3D (``X3D_XS`` / ``X3D_S`` / ``X3D_M`` / ``X3D_L``) adds::

    s1.pathway0_stem.{conv_xy,conv,bn}             -> stem.{conv_xy,conv_t,bn}
    s{n}.pathway0_res{j}.branch2.se.{fc1,fc2}      -> res{n}.{j}.se.{fc1,fc2}
    head.{conv_5,conv_5_bn,lin_5}                  -> head.{conv_5,bn_5,lin_5}

PySlowFast's X3D has a BN after every shortcut conv: its files fit zoo's default X3D
(``shortcut_bn="all"``); the X3D built with ``shortcut_bn="width_change"`` (PyTorchVideo's
network) refuses them in one line naming the kwarg.

MViT (``MVIT_*`` / ``MVITv2_*`` configs): zoo's MViT has PySlowFast's names; separate
``attn.q/k/v`` linears are fused into ``attn.qkv`` (or the reverse) where the model's differ
(:mod:`zoo.models.weights.convert.mvit`).

zoo's SlowFast, Slow and I3D are PySlowFast's layer for layer (same kernels, strides, paddings,
fusion and head column order), so the converted model computes the same logits up to float
rounding. Differences that remain: PySlowFast's head applies softmax at test time and, with
fixed-size pooling, averages over positions at crops larger than the training crop; zoo returns
logits of a global average pool (the same at the training crop). Non-local blocks (``*_NLN``
configs) have no zoo counterpart and are reported as unknown keys.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, Optional, Sequence

import torch

from . import mvit
from .common import PARAM, Layout, Scheme, check_x3d_shortcut_bns

_BLOCK = {
    "branch1": "shortcut.conv", "branch1_bn": "shortcut.bn",
    "branch2.a": "conv_a", "branch2.a_bn": "bn_a",
    "branch2.b": "conv_b", "branch2.b_bn": "bn_b",
    "branch2.c": "conv_c", "branch2.c_bn": "bn_c",
}
_FUSE = {1: "fuse_stem", 2: "fuse_res2", 3: "fuse_res3", 4: "fuse_res4"}

_STEM = re.compile(rf"^s1\.pathway(\d)_stem\.(conv|bn|conv_xy)\.{PARAM}$")
_X3D_STEM = {"conv_xy": "conv_xy", "conv": "conv_t", "bn": "bn"}
_X3D_BLOCK = {"branch2.se.fc1": "se.fc1", "branch2.se.fc2": "se.fc2"}
_X3D_HEAD = re.compile(rf"^head\.(conv_5|conv_5_bn|lin_5)\.{PARAM}$")
_X3D_HEAD_NAMES = {"conv_5": "conv_5", "conv_5_bn": "bn_5", "lin_5": "lin_5"}
_FUSE_RE = re.compile(rf"^s([1-4])_fuse\.(conv_f2s|bn)\.{PARAM}$")
_RES = re.compile(rf"^s([2-5])\.pathway(\d)_res(\d+)\.(.+)\.{PARAM}$")
_HEAD = re.compile(rf"^head\.projection\.{PARAM}$")


class PySlowFastScheme(Scheme):
    """PySlowFast -> zoo (SlowFast, Slow, I3D, X3D, MViT)."""

    name = "pyslowfast"
    kinds = ("slowfast", "resnet3d", "x3d", "mvit")

    def prepare(self, source: Dict[str, torch.Tensor], layout: Layout
                ) -> Dict[str, torch.Tensor]:
        if layout.kind == "mvit":
            return mvit.fuse_or_split_qkv(source, mvit.pyslowfast_key, layout.shapes)
        if layout.kind == "x3d":
            to_zoo = self.mapper(list(source), layout)
            check_x3d_shortcut_bns(self.name, [to_zoo(key) for key in source], layout)
        return source

    def mapper(self, source_keys: Sequence[str], layout: Layout) -> Callable[[str], Optional[str]]:
        if layout.kind == "mvit":
            return mvit.pyslowfast_key
        x3d = layout.kind == "x3d"
        block = {**_BLOCK, **_X3D_BLOCK} if x3d else _BLOCK

        def to_zoo(key: str) -> Optional[str]:
            m = _STEM.match(key)
            if m:
                prefix = layout.prefix(int(m.group(1)))
                part = _X3D_STEM[m.group(2)] if x3d else m.group(2)
                return None if prefix is None else f"{prefix}stem.{part}.{m.group(3)}"
            m = _FUSE_RE.match(key)
            if m:
                part = "conv" if m.group(2) == "conv_f2s" else "bn"
                return f"{_FUSE[int(m.group(1))]}.{part}.{m.group(3)}"
            m = _RES.match(key)
            if m and m.group(4) in block:
                prefix = layout.prefix(int(m.group(2)))
                if prefix is None:
                    return None
                return f"{prefix}res{m.group(1)}.{m.group(3)}.{block[m.group(4)]}.{m.group(5)}"
            m = _X3D_HEAD.match(key)
            if m and x3d:
                return f"head.{_X3D_HEAD_NAMES[m.group(1)]}.{m.group(2)}"
            m = _HEAD.match(key)
            return f"head.proj.{m.group(1)}" if m else None

        return to_zoo
