"""MMAction2 checkpoints (``{meta, state_dict, optimizer}``): ``ResNet3dSlowFast``,
``ResNet3dSlowOnly`` and ``ResNet3d`` (I3D-style) backbones with their cls heads, and
VideoMAE / VideoMAE V2 ``VisionTransformer`` backbones, here; other target families through a
scheme of their own (:data:`FAMILY_SCHEMES`: Video Swin in ``mmaction2_swin.py``), chosen by the
target model's keys.

Key scheme (``path`` = ``slow_path`` / ``fast_path``; single-pathway backbones have no path part;
``n`` = 1..4 is zoo's res{n+1})::

    backbone.{path}.conv1.{conv,bn}                      -> {slow_,fast_,}stem.{conv,bn}
    backbone.{path}.layer{n}.{j}.conv{1,2,3}.{conv,bn}   -> {..}res{n+1}.{j}.{conv,bn}_{a,b,c}
    backbone.{path}.layer{n}.{j}.downsample.{conv,bn}    -> {..}res{n+1}.{j}.shortcut.{conv,bn}
    backbone.slow_path.conv1_lateral.conv                -> fuse_stem.conv
    backbone.slow_path.layer{n}_lateral.conv  (n = 1..3) -> fuse_res{n+1}.conv
    cls_head.fc_cls                                      -> head.proj

Two differences from PySlowFast, handled here:

* ``cls_head.fc_cls`` columns are **fast then slow** (MMAction2's ``SlowFastHead`` concatenates
  the pathways in that order); they are permuted to zoo's slow-then-fast order.
* MMAction2's laterals are a bare conv (``norm_cfg=None, act_cfg=None``, no bias); zoo's default
  SlowFast has conv + BN + ReLU laterals, which no weights make MMAction2's. Its files convert to
  the SlowFast built with ``fuse_norm_act=False`` (``MODEL.KWARGS ['fuse_norm_act', 'False']``;
  ``--kwargs fuse_norm_act False`` here), whose laterals are bare convs; given to the default
  model they are refused in one line naming that kwarg.

VideoMAE / VideoMAE V2 (``VisionTransformer`` of ``vit_mae.py`` with a ``TimeSformerHead``)::

    backbone.patch_embed.projection               -> patch_embed.proj
    backbone.blocks.{i}.{norm1,norm2}             -> blocks.{i}.{norm1,norm2}
    backbone.blocks.{i}.attn.{qkv,q_bias,v_bias,proj} -> the same under blocks.{i}.attn
    backbone.blocks.{i}.mlp.layers.0.0 / layers.1 -> blocks.{i}.mlp.fc1 / fc2  (mmcv's FFN)
    backbone.fc_norm (backbone.norm)              -> fc_norm (norm)
    cls_head.fc_cls                               -> head
    backbone.pos_embed                            -> dropped, after checking that it is the fixed
                                                     sine-cosine table zoo computes

MMAction2 feeds SlowFast one clip and subsamples the slow frames with nearest-neighbour
interpolation (``x[:, :, ::tau]``-like), while zoo's single-tensor input picks PySlowFast's evenly
spread indices; pass ``[slow, fast]`` to control the frames exactly.
"""

from __future__ import annotations

import re
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

from .common import PARAM, ConversionError, Layout, Scheme
from .mmaction2_swin import MMAction2SwinScheme, is_swin3d

# Target families whose MMAction2 keys another module maps: (family, is the target layout one of
# theirs, their scheme). The first match converts; other models go through the ResNet mapping.
FAMILY_SCHEMES: List[Tuple[str, Callable[[Layout], bool], Scheme]] = [
    ("Video Swin (swin3d_*)", is_swin3d, MMAction2SwinScheme()),
]


def _family_scheme(layout: Layout) -> Optional[Scheme]:
    return next((scheme for _, test, scheme in FAMILY_SCHEMES if test(layout)), None)


_BLOCK = {
    "conv1.conv": "conv_a", "conv1.bn": "bn_a",
    "conv2.conv": "conv_b", "conv2.bn": "bn_b",
    "conv3.conv": "conv_c", "conv3.bn": "bn_c",
    "downsample.conv": "shortcut.conv", "downsample.bn": "shortcut.bn",
}
_PATH = {"slow_path.": 0, "fast_path.": 1, "": 0}

_STEM = re.compile(rf"^backbone\.((?:slow|fast)_path\.)?conv1\.(conv|bn)\.{PARAM}$")
_RES = re.compile(rf"^backbone\.((?:slow|fast)_path\.)?layer([1-4])\.(\d+)\.(.+)\.{PARAM}$")
_LATERAL = re.compile(rf"^backbone\.slow_path\.(conv1|layer[1-3])_lateral\.conv\.{PARAM}$")
_LATERAL_BN = re.compile(r"^fuse_\w+\.bn\.")  # zoo's lateral BNs (fuse_norm_act True)
_HEAD = re.compile(rf"^cls_head\.fc_cls\.{PARAM}$")
_VIT_RULES = [
    (re.compile(rf"^backbone\.patch_embed\.projection\.{PARAM}$"), "patch_embed.proj.{0}"),
    (re.compile(rf"^backbone\.blocks\.(\d+)\.(norm1|norm2|attn\.proj)\.{PARAM}$"),
     "blocks.{0}.{1}.{2}"),
    (re.compile(r"^backbone\.blocks\.(\d+)\.attn\.(qkv\.weight|q_bias|v_bias)$"),
     "blocks.{0}.attn.{1}"),
    (re.compile(rf"^backbone\.blocks\.(\d+)\.mlp\.layers\.0\.0\.{PARAM}$"),
     "blocks.{0}.mlp.fc1.{1}"),
    (re.compile(rf"^backbone\.blocks\.(\d+)\.mlp\.layers\.1\.{PARAM}$"), "blocks.{0}.mlp.fc2.{1}"),
    (re.compile(rf"^backbone\.(fc_norm|norm)\.{PARAM}$"), "{0}.{1}"),
    (re.compile(rf"^cls_head\.fc_cls\.{PARAM}$"), "head.{0}"),
]
_FUSE = {"conv1": "fuse_stem", "layer1": "fuse_res2", "layer2": "fuse_res3",
         "layer3": "fuse_res4"}


def _vit_key(key: str) -> Optional[str]:
    """zoo's key of an MMAction2 VideoMAE key (None: not one of its keys)."""
    for pattern, target in _VIT_RULES:
        m = pattern.match(key)
        if m:
            return target.format(*m.groups())
    return None


def _fast_channels(layout: Layout) -> int:
    """Channels the fast pathway feeds the head (the last block's conv c output)."""
    blocks = [k for k in layout.shapes if re.match(r"^fast_res5\.\d+\.conv_c\.weight$", k)]
    return layout.shapes[sorted(blocks, key=lambda k: int(k.split(".")[1]))[-1]][0]


class MMAction2Scheme(Scheme):
    """MMAction2 -> zoo (SlowFast, SlowOnly, I3D; the :data:`FAMILY_SCHEMES` families)."""

    name = "mmaction2"
    # "other": only the families of FAMILY_SCHEMES (mapper refuses the rest).
    kinds: Tuple[str, ...] = ("slowfast", "resnet3d", "videomae", "other")
    state_keys: Tuple[str, ...] = ("state_dict", "model", "model_state")

    def prepare(self, source: Dict[str, torch.Tensor], layout: Layout
                ) -> Dict[str, torch.Tensor]:
        """Drop a VideoMAE file's ``backbone.pos_embed`` (a persistent buffer in MMAction2, a
        computed one in zoo) once it is checked to be the fixed sine-cosine table."""
        family = _family_scheme(layout)
        if family is not None:
            return family.prepare(source, layout)
        if layout.kind == "slowfast" and any(map(_LATERAL.match, source)) and \
                any(map(_LATERAL_BN.match, layout.shapes)):
            raise ConversionError(
                "--from mmaction2: MMAction2's SlowFast laterals are bare convs (no BN, no ReLU), "
                "zoo's default ones conv + BN + ReLU, another network: build the model with "
                "MODEL.KWARGS ['fuse_norm_act', 'False'] (zoo-convert-checkpoint: --kwargs "
                "fuse_norm_act False), MMAction2's")
        table = source.get("backbone.pos_embed")
        if table is None:
            return source
        from ...videomae import sincos_table

        want = sincos_table(table.shape[1], table.shape[2]) if table.dim() == 3 else None
        if want is None or want.shape != table.shape or not torch.allclose(
                table.float(), want, atol=1e-5):
            raise ConversionError(
                f"--from mmaction2: backbone.pos_embed {tuple(table.shape)} is not the fixed "
                "sine-cosine table zoo's VideoMAE computes (a learned one is not supported)")
        return {k: v for k, v in source.items() if k != "backbone.pos_embed"}

    def mapper(self, source_keys: Sequence[str], layout: Layout) -> Callable[[str], Optional[str]]:
        family = _family_scheme(layout)
        if family is not None:
            return family.mapper(source_keys, layout)
        if layout.kind == "videomae":
            return _vit_key
        if layout.kind not in ("slowfast", "resnet3d"):
            raise ConversionError(
                f"--from {self.name} converts to SlowFast / Slow / I3D, VideoMAE, "
                f"{', '.join(family for family, _, _ in FAMILY_SCHEMES)} models; this model is "
                f"none of them (its keys: {', '.join(list(layout.shapes)[:4])}, ...)")

        def path_prefix(path: Optional[str]) -> Optional[str]:
            path = path or ""
            if (path == "") != (layout.kind == "resnet3d"):
                return None  # a two-pathway file into a one-pathway model, or the reverse
            return layout.prefix(_PATH[path])

        def to_zoo(key: str) -> Optional[str]:
            m = _STEM.match(key)
            if m:
                prefix = path_prefix(m.group(1))
                part = m.group(2)
                return None if prefix is None else f"{prefix}stem.{part}.{m.group(3)}"
            m = _RES.match(key)
            if m and m.group(4) in _BLOCK:
                prefix = path_prefix(m.group(1))
                if prefix is None:
                    return None
                stage = int(m.group(2)) + 1
                return f"{prefix}res{stage}.{m.group(3)}.{_BLOCK[m.group(4)]}.{m.group(5)}"
            m = _LATERAL.match(key)
            if m and layout.kind == "slowfast":
                return f"{_FUSE[m.group(1)]}.conv.{m.group(2)}"
            m = _HEAD.match(key)
            return f"head.proj.{m.group(1)}" if m else None

        return to_zoo

    def transform(self, zoo_key: str, tensor: torch.Tensor, layout: Layout) -> torch.Tensor:
        family = _family_scheme(layout)
        if family is not None:
            return family.transform(zoo_key, tensor, layout)
        if layout.kind == "videomae":
            return tensor
        if zoo_key == "head.proj.weight" and layout.kind == "slowfast":
            fast = _fast_channels(layout)  # columns [fast | slow] -> [slow | fast]
            return torch.cat([tensor[:, fast:], tensor[:, :fast]], dim=1).contiguous()
        return tensor

    def fill(self, zoo_key: str, layout: Layout) -> Optional[Tuple[torch.Tensor, str]]:
        family = _family_scheme(layout)
        if family is not None:
            return family.fill(zoo_key, layout)
        return None

    def notes(self, layout: Layout) -> List[str]:
        family = _family_scheme(layout)
        if family is not None:
            return family.notes(layout)
        return []
