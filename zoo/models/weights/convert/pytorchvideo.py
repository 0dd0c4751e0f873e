"""PyTorchVideo checkpoints (``torch.hub`` ``slowfast_r50`` / ``slowfast_r101`` / ``slow_r50`` /
``i3d_r50`` ..., or ``model.state_dict()`` of ``create_slowfast`` / ``create_resnet``).

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

The architectures are the same (PyTorchVideo's ``create_slowfast`` reproduces PySlowFast), so the
logits agree up to float rounding; PyTorchVideo's head projects every position then averages,
which equals zoo's average-then-project.
"""

from __future__ import annotations

import re
from typing import Callable, Optional, Sequence

from .common import PARAM, Layout, Scheme

_BLOCK = {
    "branch1_conv": "shortcut.conv", "branch1_norm": "shortcut.bn",
    "branch2.conv_a": "conv_a", "branch2.norm_a": "bn_a",
    "branch2.conv_b": "conv_b", "branch2.norm_b": "bn_b",
    "branch2.conv_c": "conv_c", "branch2.norm_c": "bn_c",
}
_NORM = {"conv": "conv", "norm": "bn", "conv_fast_to_slow": "conv"}

_MP_STEM = re.compile(rf"^blocks\.0\.multipathway_blocks\.(\d)\.(conv|norm)\.{PARAM}$")
_MP_FUSE = re.compile(rf"^blocks\.(\d+)\.multipathway_fusion\.(conv_fast_to_slow|norm)\.{PARAM}$")
_MP_RES = re.compile(
    rf"^blocks\.(\d+)\.multipathway_blocks\.(\d)\.res_blocks\.(\d+)\.(.+)\.{PARAM}$")
_SP_STEM = re.compile(rf"^blocks\.0\.(conv|norm)\.{PARAM}$")
_SP_RES = re.compile(rf"^blocks\.(\d+)\.res_blocks\.(\d+)\.(.+)\.{PARAM}$")
_HEAD = re.compile(rf"^blocks\.(\d+)\.proj\.{PARAM}$")
_FUSE_NAMES = ("fuse_stem", "fuse_res2", "fuse_res3", "fuse_res4")


class PyTorchVideoScheme(Scheme):
    """PyTorchVideo -> zoo (SlowFast, Slow, I3D)."""

    name = "pytorchvideo"

    def mapper(self, source_keys: Sequence[str], layout: Layout) -> Callable[[str], Optional[str]]:
        # Single pathway: the blocks holding res_blocks are res2..res5 in order.
        stage_blocks = sorted({int(m.group(1)) for m in map(_SP_RES.match, source_keys) if m})
        stage_of = {b: f"res{n + 2}" for n, b in enumerate(stage_blocks)}

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
            m = _SP_STEM.match(key)
            if m and layout.kind == "resnet3d":
                return f"stem.{_NORM[m.group(1)]}.{m.group(2)}"
            m = _SP_RES.match(key)
            if m and m.group(3) in _BLOCK and layout.kind == "resnet3d":
                return f"{stage_of[int(m.group(1))]}.{m.group(2)}.{_BLOCK[m.group(3)]}.{m.group(4)}"
            m = _HEAD.match(key)
            return f"head.proj.{m.group(2)}" if m else None

        return to_zoo
