"""gluoncv.torch's action-recognition model names, registered as aliases of zoo architectures.

A gluoncv name is ``<base>_<suffix>``: the base names the architecture and its input, the suffix
the class count (``kinetics400`` 400, ``kinetics700`` 700, ``sthsthv2`` 174, ``custom`` whatever
``num_classes`` says). Every alias builds the zoo architecture it names, layer for layer the net
gluoncv's code builds (parameter counts equal; tests/test_gluoncv_models.py), and carries the
input of gluoncv's config for it (``CLIP_LEN`` frames at ``FRAME_RATE`` stride, ``CROP_SIZE``,
``NUM_SEGMENT`` segments for the 2D nets) and its class count in its facts (``alias_of`` names
the architecture). gluoncv's video transforms normalise with the ImageNet mean / std.

A fixed-class alias given another ``num_classes`` stops with one line naming the ``_custom``
alias, instead of silently building a head that no longer matches the name's published weights.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Optional, Tuple

import torch.nn as nn

# The families whose architectures the aliases build must be registered first.
from . import r2plus1d, resnet3d, slowfast, tpn, tsn, vmz  # noqa: F401
from .facts import IMAGENET_MEAN, IMAGENET_STD, ModelFacts, video_facts
from .registry import MODEL_REGISTRY, register_model

__all__ = ["GLUONCV_BASES", "SUFFIX_CLASSES", "gluoncv_aliases"]

SUFFIX_CLASSES: Dict[str, Optional[int]] = {
    "kinetics400": 400, "kinetics700": 700, "sthsthv2": 174, "custom": None,
}

_K400 = ("kinetics400",)
_R2P1D = dict(dropout=0.5)  # gluoncv's R2Plus1D drops out 0.5 before fc; zoo's default is 0
_SF = dict(slow_index="stride")  # gluoncv's SlowFast feeds x[:, :, ::alpha] to the slow pathway

# base -> (zoo architecture, builder kwargs, frames, stride, crop, fixed-class suffixes). Inputs
# from gluoncv's scripts/action-recognition/configuration/*.yaml; the suffixes are the names its
# model_zoo.py defines (each base also gets ``_custom``). stride None = TSN segments.
GLUONCV_BASES: Dict[str, Tuple[str, Dict[str, Any], int, Optional[int], int, Tuple[str, ...]]] = {
    "resnet18_v1b": ("tsn_resnet18", {}, 7, None, 224, _K400),
    "resnet34_v1b": ("tsn_resnet34", {}, 7, None, 224, _K400),
    "resnet50_v1b": ("tsn_resnet50", {}, 7, None, 224, ("kinetics400", "sthsthv2")),
    "resnet101_v1b": ("tsn_resnet101", {}, 7, None, 224, _K400),
    "resnet152_v1b": ("tsn_resnet152", {}, 7, None, 224, _K400),
    "i3d_resnet50_v1": ("i3d_resnet50_v1", {}, 32, 2, 224, ("kinetics400", "sthsthv2")),
    "i3d_resnet101_v1": ("i3d_resnet101_v1", {}, 32, 2, 224, _K400),
    "i3d_nl5_resnet50_v1": ("i3d_nl5_resnet50_v1", {}, 32, 2, 224, _K400),
    "i3d_nl10_resnet50_v1": ("i3d_nl10_resnet50_v1", {}, 32, 2, 224, _K400),
    "i3d_nl5_resnet101_v1": ("i3d_nl5_resnet101_v1", {}, 32, 2, 224, _K400),
    "i3d_nl10_resnet101_v1": ("i3d_nl10_resnet101_v1", {}, 32, 2, 224, _K400),
    "i3d_slow_resnet50_f8s8": ("slow_8x8_resnet50", {}, 8, 8, 224, _K400),
    "i3d_slow_resnet50_f16s4": ("slow_8x8_resnet50", {}, 16, 4, 224, _K400),
    "i3d_slow_resnet50_f32s2": ("slow_8x8_resnet50", {}, 32, 2, 224, _K400),
    "i3d_slow_resnet101_f8s8": ("slow_8x8_resnet101", {}, 8, 8, 224, _K400),
    "i3d_slow_resnet101_f16s4": ("slow_8x8_resnet101", {}, 16, 4, 224,
                                 ("kinetics400", "kinetics700")),
    "i3d_slow_resnet101_f32s2": ("slow_8x8_resnet101", {}, 32, 2, 224, _K400),
    "ircsn_v2_resnet152_f32s2": ("ircsn_resnet152", {}, 32, 2, 224, _K400),
    "r2plus1d_v1_resnet18": ("r2plus1d_resnet18", _R2P1D, 16, 2, 112, _K400),
    "r2plus1d_v1_resnet34": ("r2plus1d_resnet34", _R2P1D, 16, 2, 112, _K400),
    "r2plus1d_v1_resnet50": ("r2plus1d_resnet50", _R2P1D, 16, 2, 112, _K400),
    "r2plus1d_v1_resnet101": ("r2plus1d_resnet101", _R2P1D, 16, 2, 112, _K400),
    "r2plus1d_v1_resnet152": ("r2plus1d_resnet152", _R2P1D, 16, 2, 112, _K400),
    "r2plus1d_v2_resnet152": ("r2plus1d_v2_resnet152", {}, 32, 2, 112, _K400),
    "slowfast_4x16_resnet50": ("slowfast_4x16_resnet50", _SF, 32, 2, 224, _K400),
    "slowfast_8x8_resnet50": ("slowfast_8x8_resnet50", _SF, 32, 2, 224, _K400),
    "slowfast_16x8_resnet50": ("slowfast_16x8_resnet50", _SF, 64, 2, 224, ("sthsthv2",)),
    # gluoncv's 4x16 R101 is its 8x8 R101 (fusion kernel 5) with alpha 8.
    "slowfast_4x16_resnet101": ("slowfast_8x8_resnet101", dict(_SF, alpha=8), 32, 2, 224, _K400),
    "slowfast_8x8_resnet101": ("slowfast_8x8_resnet101", _SF, 32, 2, 224, _K400),
    "slowfast_16x8_resnet101": ("slowfast_8x8_resnet101", _SF, 64, 2, 224, _K400),
    "slowfast_16x8_resnet101_50_50": ("slowfast_16x8_resnet101", _SF, 64, 2, 224, _K400),
    "tpn_resnet50_f8s8": ("tpn_resnet50_f8s8", {}, 8, 8, 224, _K400),
    "tpn_resnet50_f16s4": ("tpn_resnet50_f16s4", {}, 16, 4, 224, _K400),
    "tpn_resnet50_f32s2": ("tpn_resnet50_f32s2", {}, 32, 2, 224, _K400),
    "tpn_resnet101_f8s8": ("tpn_resnet101_f8s8", {}, 8, 8, 224, _K400),
    "tpn_resnet101_f16s4": ("tpn_resnet101_f16s4", {}, 16, 4, 224, _K400),
    "tpn_resnet101_f32s2": ("tpn_resnet101_f32s2", {}, 32, 2, 224, _K400),
}

# Where one gluoncv config's input differs from its base's (i3d_resnet50_v1_sthsthv2.yaml:
# CLIP_LEN 16; resnet50_v1b_sthsthv2.yaml: NUM_SEGMENT 8).
_INPUT_OVERRIDES: Dict[str, int] = {
    "i3d_resnet50_v1_sthsthv2": 16,
    "resnet50_v1b_sthsthv2": 8,
}


def _alias_facts(name: str, arch: str, frames: int, stride: Optional[int], crop: int,
                 classes: Optional[int], inherits: bool) -> ModelFacts:
    return video_facts(_INPUT_OVERRIDES.get(name, frames), stride, crop, IMAGENET_MEAN,
                       IMAGENET_STD, alias_of=arch, num_classes=classes, source="gluoncv",
                       inherits_weights=inherits)


def _alias_builder(name: str, base: str, arch: str,
                   classes: Optional[int]) -> Callable[..., nn.Module]:
    """A builder of ``arch`` that refuses a class count other than the one ``name`` fixes."""
    target = MODEL_REGISTRY.get(arch)

    def build(num_classes: int = classes or 400, **kwargs: Any) -> nn.Module:
        if classes is not None and num_classes != classes:
            raise ValueError(
                f"model {name!r} is gluoncv's {classes}-class net but num_classes is "
                f"{num_classes}: name {base + '_custom'!r} (or {arch!r}) for another class count")
        return target(num_classes=num_classes, **kwargs)

    return build


def _register_alias(name: str, base: str, arch: str, arch_kwargs: Dict[str, Any],
                    facts: ModelFacts) -> None:
    """Register ``name`` as ``arch`` built with ``arch_kwargs`` and the facts' class count."""
    classes = facts.num_classes
    extra = f" with {arch_kwargs}" if arch_kwargs else ""
    count = f"{classes} classes" if classes else "num_classes classes"
    doc = f"""gluoncv's ``{name}``: zoo's ``{arch}``{extra}, {count}.

    Args:
        num_classes: Output classes (must be {classes} unless the name ends in ``_custom``).
        **kwargs: Passed to ``{arch}``.
    """
    register_model(name, _alias_builder(name, base, arch, classes), facts, doc, **arch_kwargs)


def gluoncv_aliases() -> Dict[str, str]:
    """Every registered gluoncv name and the zoo architecture it builds."""
    out = {}
    for base, (arch, _, _, _, _, suffixes) in GLUONCV_BASES.items():
        for suffix in suffixes + ("custom",):
            out[f"{base}_{suffix}"] = arch
    return out


def _same_net_as(arch: str, kwargs: Dict[str, Any], frames: int, stride: Optional[int]) -> bool:
    """Whether weights trained for ``arch`` fit an alias of it as trained: the same input
    frames and stride, and no kwarg that changes what the layers compute (a SlowFast ``alpha``).
    An alias that differs gets no weights from its base (same shapes, other training)."""
    facts = MODEL_REGISTRY.get(arch).facts
    same_input = (facts.input_frames, facts.sampling_stride) == (frames, stride)
    return same_input and "alpha" not in kwargs


def _register_all() -> None:
    for base, (arch, kwargs, frames, stride, crop, suffixes) in GLUONCV_BASES.items():
        inherits = _same_net_as(arch, kwargs, frames, stride)
        for suffix in suffixes + ("custom",):
            name, classes = f"{base}_{suffix}", SUFFIX_CLASSES[suffix]
            facts = _alias_facts(name, arch, frames, stride, crop, classes, inherits)
            _register_alias(name, base, arch, kwargs, facts)


_register_all()
