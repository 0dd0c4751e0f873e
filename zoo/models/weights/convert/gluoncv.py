"""gluoncv.torch checkpoints: the bare ``state_dict()`` files of gluoncv's action-recognition
model zoo (``gluoncv/torch/model_zoo/model_store.py``; ``NAME-<sha1 prefix>.pth``).

zoo builds each of these nets layer for layer like gluoncv's code, so converting is renaming.
Key scheme by family (``n`` = stage 1..4, ``j`` = block; X -> Y below: ``conv1/2/3`` ->
``conv_a/b/c``, ``bn1/2/3`` -> ``bn_a/b/c``, ``downsample.0/1`` -> ``shortcut.conv/bn``,
``nonlocal_block.*`` unchanged)::

    I3D, I3D non-local    first_stage.{0,1}            -> stem.{conv,bn}
                          res_layers.{n-1}.{j}.X       -> res{n+1}.{j}.Y
    Slow (i3d_slow), TPN  conv1 / bn1                  -> stem.{conv,bn}
                          layer{n}.{j}.X               -> res{n+1}.{j}.Y
    TPN neck              TPN_neck.spatial_modulation.spatial_modulation.0.0.{conv,bn}
                                                       -> neck.spatial.{conv,bn}
                          TPN_neck.temporal_modulation_ops.{i}.conv -> neck.temporal.{i}.0
                          TPN_neck.downsampling_ops.0.conv          -> neck.downsample.0
                          TPN_neck.level_fusion_op.ops.{i}.{conv,norm}
                                                       -> neck.bottom_up_fusion.convs.{i}.{0,1}
                          TPN_neck.level_fusion_op.fusion_conv.{0,1}
                                                       -> neck.bottom_up_fusion.fuse.{conv,bn}
                          TPN_neck.level_fusion_op2.*  -> neck.top_down_fusion.* (same pattern)
                          TPN_neck.pyramid_fusion_op.{0,1}  -> neck.pyramid_fusion.{conv,bn}
                          TPN_neck.aux_head.convs.{conv,bn} -> aux_head.0.{conv,bn}
                          TPN_neck.aux_head.fc              -> aux_head.1
    SlowFast              {slow,fast}_conv1 / _bn1     -> {slow,fast}_stem.{conv,bn}
                          lateral_p1.{0,1}             -> fuse_stem.{conv,bn}
                          lateral_res{n}.{0,1}         -> fuse_res{n}.{conv,bn}
                          {slow,fast}_res{n}.{j}.X     -> {slow,fast}_res{n}.{j}.Y
    R(2+1)D v1            conv1, bn1, conv2, bn2       -> stem.0, stem.1, stem.3, stem.4
                          layer{n}.{j}.conv{k}.{conv1,bn1,conv2} -> layer{n}.{j}.conv{k}.0.{0,1,3}
                          layer{n}.{j}.conv{k}         -> layer{n}.{j}.conv{k}.0  (1x1x1 convs)
                          layer{n}.{j}.bn{k}           -> layer{n}.{j}.conv{k}.1
    I3D, Slow, TPN, SF    fc (I3D: also head.1)        -> head.proj

ir-CSN v2, R(2+1)D v2 and TSN on a ResNet-v1b already have gluoncv's key names in zoo (R(2+1)D v1
keeps ``downsample`` and ``fc``): their tensors pass unchanged (the key-based format detection
then calls the file ``zoo``'s). With random weights, zoo loading gluoncv's state dict gives the
logits of gluoncv 0.10.5's own code exactly (TSN: within 1e-5, gluoncv averages before ``fc``);
tests/test_gluoncv_weights.py.

gluoncv's I3D registers its classifier twice (``fc`` and ``head.1``, one module) and its
non-local blocks their output conv and BN twice (``W`` / ``bn`` and ``W_bn.0`` / ``W_bn.1``), so
their state dicts hold those tensors twice. :meth:`GluonCVScheme.prepare` drops the second copy
after checking that it equals the first; any other leftover tensor is an error, as always.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .common import PARAM, ConversionError, Layout, Scheme

_BLOCK = {"conv1": "conv_a", "bn1": "bn_a", "conv2": "conv_b", "bn2": "bn_b",
          "conv3": "conv_c", "bn3": "bn_c", "downsample.0": "shortcut.conv",
          "downsample.1": "shortcut.bn"}

# Second copies of a tensor (gluoncv registers the same module under two names): copy -> first.
_DUPLICATES = ((re.compile(r"^head\.1\.(.+)$"), r"fc.\1"),
               (re.compile(r"^(.*nonlocal_block)\.W_bn\.0\.(.+)$"), r"\1.W.\2"),
               (re.compile(r"^(.*nonlocal_block)\.W_bn\.1\.(.+)$"), r"\1.bn.\2"))

_TPN_NECK = (
    (r"spatial_modulation\.spatial_modulation\.0\.0\.(conv|bn)", r"neck.spatial.\1"),
    (r"temporal_modulation_ops\.(\d+)\.conv", r"neck.temporal.\1.0"),
    (r"downsampling_ops\.(\d+)\.conv", r"neck.downsample.\1"),
    (r"level_fusion_op\.ops\.(\d+)\.conv", r"neck.bottom_up_fusion.convs.\1.0"),
    (r"level_fusion_op\.ops\.(\d+)\.norm", r"neck.bottom_up_fusion.convs.\1.1"),
    (r"level_fusion_op\.fusion_conv\.0", "neck.bottom_up_fusion.fuse.conv"),
    (r"level_fusion_op\.fusion_conv\.1", "neck.bottom_up_fusion.fuse.bn"),
    (r"level_fusion_op2\.ops\.(\d+)\.conv", r"neck.top_down_fusion.convs.\1.0"),
    (r"level_fusion_op2\.ops\.(\d+)\.norm", r"neck.top_down_fusion.convs.\1.1"),
    (r"level_fusion_op2\.fusion_conv\.0", "neck.top_down_fusion.fuse.conv"),
    (r"level_fusion_op2\.fusion_conv\.1", "neck.top_down_fusion.fuse.bn"),
    (r"pyramid_fusion_op\.0", "neck.pyramid_fusion.conv"),
    (r"pyramid_fusion_op\.1", "neck.pyramid_fusion.bn"),
    (r"aux_head\.convs\.(conv|bn)", r"aux_head.0.\1"),
    (r"aux_head\.fc", "aux_head.1"),
)
_TPN_NECK_RE = [(re.compile(rf"^TPN_neck\.{src}$"), dst) for src, dst in _TPN_NECK]

_STEM = {"first_stage.0": "stem.conv", "first_stage.1": "stem.bn", "conv1": "stem.conv",
         "bn1": "stem.bn", "slow_conv1": "slow_stem.conv", "slow_bn1": "slow_stem.bn",
         "fast_conv1": "fast_stem.conv", "fast_bn1": "fast_stem.bn",
         "lateral_p1.0": "fuse_stem.conv", "lateral_p1.1": "fuse_stem.bn", "fc": "head.proj"}
_R2P1D_STEM = {"conv1": "stem.0", "bn1": "stem.1", "conv2": "stem.3", "bn2": "stem.4"}
_TOP = re.compile(rf"^([a-z_]+[0-9]?(?:\.[01])?)\.{PARAM}$")
_I3D_RES = re.compile(rf"^res_layers\.([0-3])\.(\d+)\.(.+)\.{PARAM}$")
_LAYER = re.compile(rf"^layer([1-4])\.(\d+)\.(.+)\.{PARAM}$")
_SF_RES = re.compile(rf"^(slow|fast)_res([2-5])\.(\d+)\.(.+)\.{PARAM}$")
_LATERAL = re.compile(rf"^lateral_res([2-4])\.([01])\.{PARAM}$")
_R2P1D_PART = re.compile(r"^conv([1-3])\.(conv1|bn1|conv2)$")
_R2P1D_WHOLE = re.compile(r"^(conv|bn)([1-3])$")


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal values (shapes only for meta tensors, which hold none)."""
    if a.is_meta or b.is_meta:
        return a.shape == b.shape
    return a.shape == b.shape and torch.equal(a, b)


def _block(part: str) -> Optional[str]:
    """A bottleneck block's sub-module name in zoo's 3D ResNets."""
    if part in _BLOCK:
        return _BLOCK[part]
    if part.startswith("nonlocal_block."):
        return part
    return None


def _r2plus1d_block(part: str) -> Optional[str]:
    """A gluoncv R(2+1)D v1 block's sub-module in zoo's (torchvision's) layout."""
    m = _R2P1D_PART.match(part)
    if m:
        return f"conv{m.group(1)}.0.{ {'conv1': 0, 'bn1': 1, 'conv2': 3}[m.group(2)]}"
    m = _R2P1D_WHOLE.match(part)
    if m:
        return f"conv{m.group(2)}.0" if m.group(1) == "conv" else f"conv{m.group(2)}.1"
    return part if part.startswith("downsample.") else None


def _candidates(key: str) -> List[str]:
    """Every zoo key ``key`` may stand for; the target model's layout picks the one it has."""
    out = [key]  # ir-CSN v2, R(2+1)D v2, TSN: zoo uses gluoncv's names
    m = _TOP.match(key)
    if m:
        if m.group(1) in _STEM:
            out.append(f"{_STEM[m.group(1)]}.{m.group(2)}")
        if m.group(1) in _R2P1D_STEM:
            out.append(f"{_R2P1D_STEM[m.group(1)]}.{m.group(2)}")
    m = _I3D_RES.match(key)
    if m and _block(m.group(3)):
        out.append(f"res{int(m.group(1)) + 2}.{m.group(2)}.{_block(m.group(3))}.{m.group(4)}")
    m = _LAYER.match(key)
    if m:
        if _block(m.group(3)):
            out.append(f"res{int(m.group(1)) + 1}.{m.group(2)}.{_block(m.group(3))}.{m.group(4)}")
        if _r2plus1d_block(m.group(3)):
            out.append(f"layer{m.group(1)}.{m.group(2)}.{_r2plus1d_block(m.group(3))}."
                       f"{m.group(4)}")
    m = _SF_RES.match(key)
    if m and _block(m.group(4)):
        out.append(f"{m.group(1)}_res{m.group(2)}.{m.group(3)}.{_block(m.group(4))}.{m.group(5)}")
    m = _LATERAL.match(key)
    if m:
        out.append(f"fuse_res{m.group(1)}.{'conv' if m.group(2) == '0' else 'bn'}.{m.group(3)}")
    module, _, param = key.rpartition(".")
    for pattern, dst in _TPN_NECK_RE:
        if pattern.match(module):
            out.append(f"{pattern.sub(dst, module)}.{param}")
    return out


class GluonCVScheme(Scheme):
    """gluoncv.torch -> zoo (I3D, I3D non-local, Slow, TPN, SlowFast, R(2+1)D v1/v2, ir-CSN v2,
    TSN ResNet-v1b)."""

    name = "gluoncv"
    kinds: Tuple[str, ...] = ("slowfast", "resnet3d", "other")
    state_keys: Tuple[str, ...] = ("state_dict", "model", "model_state")

    def prepare(self, source: Dict[str, torch.Tensor], layout: Layout
                ) -> Dict[str, torch.Tensor]:
        """``source`` without the second copies of twice-registered modules (checked equal)."""
        out = dict(source)
        for key in source:
            for pattern, first in _DUPLICATES:
                if not pattern.match(key):
                    continue
                original = pattern.sub(first, key)
                if original not in source:
                    continue  # a lone W_bn / head.1: leave it to the mapping (an error there)
                if not _same(source[original], source[key]):
                    raise ConversionError(
                        f"--from gluoncv: {key} should be a second copy of {original} (gluoncv "
                        "registers that module twice) but its values differ; the file is not "
                        "a gluoncv state dict")
                del out[key]
        return out

    def mapper(self, source_keys: Sequence[str], layout: Layout) -> Callable[[str], Optional[str]]:
        def to_zoo(key: str) -> Optional[str]:
            found = {c for c in _candidates(key) if c in layout.shapes}
            return found.pop() if len(found) == 1 else None

        return to_zoo


def looks_like_gluoncv(keys: Sequence[str], state: Dict[str, torch.Tensor]) -> bool:
    """Whether state-dict ``keys`` are gluoncv.torch's (for format detection).

    gluoncv's I3D (``first_stage``, ``res_layers``), TPN (``TPN_neck``) and SlowFast
    (``fast_conv1``, ``lateral_p1``) are told by name; its Slow and R(2+1)D v1 name layers like a
    torchvision 2D ResNet (``conv1``, ``layer1``) but their ``conv1.weight`` is 5-D.
    """
    if any(k.startswith(("first_stage.", "res_layers.", "TPN_neck.", "fast_conv1.",
                         "lateral_p1.")) for k in keys):
        return True
    conv1 = state.get("conv1.weight")
    return conv1 is not None and conv1.dim() == 5 and any(k.startswith("layer1.") for k in keys)
