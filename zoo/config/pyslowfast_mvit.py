"""PySlowFast's MVIT config section -> a zoo MViT (``zoo/models/mvit.py``): registered name and
``MODEL.KWARGS``.

zoo's MViT builder takes PySlowFast's ``MVIT.<KEY>`` keys lowercased, plus ``frames``
(DATA.NUM_FRAMES), ``crop_size`` (DATA.TRAIN_CROP_SIZE), ``dropout`` (MODEL.DROPOUT_RATE) and
``in_channels`` (DATA.INPUT_CHANNEL_NUM[0]); with MVIT.REV.ENABLE, the reversible MViT
(``zoo/models/mvit_rev.py``) takes the same keys plus the ``MVIT.REV.<KEY>`` ones as
``rev_<key>``. This module holds PySlowFast's MVIT defaults (``slowfast/config/defaults.py``)
and the published MViT configs the registered names are built from, as plain data (zoo/config
never imports zoo.models): :func:`mvit_model` picks the registered name closest to a config and
lists, as kwargs, every value that differs from it, so ``create_model(name, **kwargs)`` builds
exactly the config's network.
"""

from __future__ import annotations

import ast
from typing import Any, Dict, List, Tuple

from .validation import ConfigError

__all__ = ["MVIT_CONFIGS", "MVIT_DEFAULTS", "MVIT_KEYS", "MVIT_REV_CONFIGS", "builder_kwargs",
           "mvit_model", "mvit_notes"]

# PySlowFast's _C.MVIT defaults (slowfast/config/defaults.py).
MVIT_DEFAULTS: Dict[str, Any] = {
    "MVIT.MODE": "conv", "MVIT.POOL_FIRST": False, "MVIT.CLS_EMBED_ON": True,
    "MVIT.PATCH_KERNEL": [3, 7, 7], "MVIT.PATCH_STRIDE": [2, 4, 4],
    "MVIT.PATCH_PADDING": [2, 4, 4], "MVIT.PATCH_2D": False, "MVIT.EMBED_DIM": 96,
    "MVIT.NUM_HEADS": 1, "MVIT.MLP_RATIO": 4.0, "MVIT.QKV_BIAS": True,
    "MVIT.DROPPATH_RATE": 0.1, "MVIT.LAYER_SCALE_INIT_VALUE": 0.0, "MVIT.DEPTH": 16,
    "MVIT.NORM": "layernorm", "MVIT.DIM_MUL": [], "MVIT.HEAD_MUL": [],
    "MVIT.POOL_KV_STRIDE": [], "MVIT.POOL_KV_STRIDE_ADAPTIVE": None, "MVIT.POOL_Q_STRIDE": [],
    "MVIT.POOL_KVQ_KERNEL": None, "MVIT.ZERO_DECAY_POS_CLS": True, "MVIT.NORM_STEM": False,
    "MVIT.SEP_POS_EMBED": False, "MVIT.DROPOUT_RATE": 0.0, "MVIT.USE_ABS_POS": True,
    "MVIT.REL_POS_SPATIAL": False, "MVIT.REL_POS_TEMPORAL": False,
    "MVIT.REL_POS_ZERO_INIT": False, "MVIT.RESIDUAL_POOLING": False,
    "MVIT.DIM_MUL_IN_ATT": False, "MVIT.SEPARATE_QKV": False, "MVIT.HEAD_INIT_SCALE": 1.0,
    "MVIT.USE_MEAN_POOLING": False, "MVIT.USE_FIXED_SINCOS_POS": False,
    "MVIT.REV.ENABLE": False, "MVIT.REV.RESPATH_FUSE": "concat", "MVIT.REV.BUFFER_LAYERS": [],
    "MVIT.REV.RES_PATH": "conv", "MVIT.REV.PRE_Q_FUSION": "avg",
}
# The "MVIT.*" keys mvit_model consumes.
MVIT_KEYS = frozenset(MVIT_DEFAULTS)

# Read but not passed on: PySlowFast never hands LAYER_SCALE_INIT_VALUE to its blocks;
# REV.ENABLE picks the builder (the reversible one's name), not an argument.
_IGNORED = {"MVIT.LAYER_SCALE_INIT_VALUE", "MVIT.REV.ENABLE"}
# The REV.* keys: arguments (``rev_<key>``) of the reversible builder only.
_REV_KEYS = {"MVIT.REV.RESPATH_FUSE", "MVIT.REV.BUFFER_LAYERS", "MVIT.REV.RES_PATH",
             "MVIT.REV.PRE_Q_FUSION"}
# Values zoo's MViT does not implement (key -> the only value it takes).
_FIXED = {"MVIT.PATCH_2D": (False, "2D (image) patches are not implemented"),
          "MVIT.USE_FIXED_SINCOS_POS": (False, "fixed sine-cosine positions are not implemented"),
          "MVIT.NORM": ("layernorm", "PySlowFast has no other norm"),
          "DETECTION.ENABLE": (False, "zoo's MViT has no detection head")}


def _stages(depth: int, starts: Tuple[int, ...], every_block: bool) -> Dict[str, Any]:
    """DIM_MUL / HEAD_MUL doubling at ``starts`` and POOL_Q_STRIDE 1x2x2 there; ``every_block``
    lists a stride for every block, 1x1x1 elsewhere (the MViTv2 configs: with POOL_KVQ_KERNEL
    every block then has a stride-1 query pooling conv)."""
    mul = [[i, 2.0] for i in starts]
    strides = [[i, 1, 2, 2] if i in starts else [i, 1, 1, 1]
               for i in range(depth) if every_block or i in starts]
    return {"MVIT.DEPTH": depth, "MVIT.DIM_MUL": mul, "MVIT.HEAD_MUL": mul,
            "MVIT.POOL_Q_STRIDE": strides}


_COMMON = {"MVIT.ZERO_DECAY_POS_CLS": False, "MVIT.PATCH_KERNEL": [3, 7, 7],
           "MVIT.PATCH_STRIDE": [2, 4, 4], "MVIT.PATCH_PADDING": [1, 3, 3],
           "MVIT.POOL_KV_STRIDE_ADAPTIVE": [1, 8, 8], "DATA.INPUT_CHANNEL_NUM": [3],
           "MODEL.DROPOUT_RATE": 0.5}
_V1 = dict(_COMMON, **{"MVIT.SEP_POS_EMBED": True})
_V2 = dict(_COMMON, **{"MVIT.USE_ABS_POS": False, "MVIT.REL_POS_SPATIAL": True,
                       "MVIT.REL_POS_TEMPORAL": True, "MVIT.POOL_KVQ_KERNEL": [3, 3, 3],
                       "MVIT.DIM_MUL_IN_ATT": True, "MVIT.RESIDUAL_POOLING": True})


def _data(frames: int, rate: int, crop: int) -> Dict[str, Any]:
    return {"DATA.NUM_FRAMES": frames, "DATA.SAMPLING_RATE": rate, "DATA.TRAIN_CROP_SIZE": crop,
            "DATA.TEST_CROP_SIZE": crop}


# Registered name -> (PySlowFast config, its keys that differ from PySlowFast's defaults).
MVIT_CONFIGS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "mvit_v2_s": ("configs/Kinetics/MVITv2_S_16x4.yaml", dict(
        _V2, **_data(16, 4, 224), **_stages(16, (1, 3, 14), True),
        **{"MVIT.DROPPATH_RATE": 0.2})),
    "mvit_v2_b": ("configs/Kinetics/MVITv2_B_32x3.yaml", dict(
        _V2, **_data(32, 3, 224), **_stages(24, (2, 5, 21), True),
        **{"MVIT.DROPPATH_RATE": 0.3})),
    "mvit_v2_l": ("configs/Kinetics/MVITv2_L_40x3_test.yaml", dict(
        _V2, **_data(40, 3, 312), **_stages(48, (2, 8, 44), True),
        **{"MVIT.DROPPATH_RATE": 0.75, "MVIT.EMBED_DIM": 144, "MVIT.NUM_HEADS": 2,
           "DATA.MEAN": [0.485, 0.456, 0.406], "DATA.STD": [0.229, 0.224, 0.225]})),
    "mvit_v1_b_16x4": ("configs/Kinetics/MVIT_B_16x4_CONV.yaml", dict(
        _V1, **_data(16, 4, 224), **_stages(16, (1, 3, 14), False),
        **{"MVIT.DROPPATH_RATE": 0.2, "MVIT.POOL_KVQ_KERNEL": [3, 3, 3]})),
    "mvit_v1_b_32x3": ("configs/Kinetics/MVIT_B_32x3_CONV.yaml", dict(
        _V1, **_data(32, 3, 224), **_stages(24, (2, 5, 21), False),
        **{"MVIT.DROPPATH_RATE": 0.3})),
}


# Registered name -> (PySlowFast config, its keys that differ from PySlowFast's defaults) of the
# reversible MViTs. PySlowFast's reversible MViT asserts CLS_EMBED_ON is False (its YAML says
# True, which PySlowFast cannot build): the network it builds, and publishes, has no class token.
MVIT_REV_CONFIGS: Dict[str, Tuple[str, Dict[str, Any]]] = {
    "mvit_rev_b_16x4": ("configs/Kinetics/REV_MVIT_B_16x4_CONV.yaml", dict(
        _V1, **_data(16, 4, 224), **_stages(16, (1, 3, 14), False),
        **{"MVIT.DROPPATH_RATE": 0.05, "MVIT.POOL_KVQ_KERNEL": [3, 3, 3],
           "MVIT.QKV_BIAS": False, "MVIT.CLS_EMBED_ON": False, "MVIT.REV.ENABLE": True,
           "MVIT.REV.BUFFER_LAYERS": [1, 3, 14]})),
}


def _value(value: Any) -> Any:
    """A YAML value as yacs reads it (``(3, 7, 7)`` is a string in YAML), tuples as lists."""
    if isinstance(value, str) and value.strip()[:1] in "([":
        try:
            value = ast.literal_eval(value)
        except (ValueError, SyntaxError):
            return value
    if isinstance(value, (list, tuple)):
        return [_value(x) for x in value]
    return value


def builder_kwargs(v: Dict[str, Any], source: str = "config") -> Dict[str, Any]:
    """The MViT builder's keyword arguments for the flat PySlowFast keys ``v`` (MVIT defaults
    filled in here; DATA / MODEL keys taken from ``v`` where present).

    Raises:
        ConfigError: for an MVIT key PySlowFast does not define, or a value zoo's MViT cannot
            honour (one line naming the key).
    """
    mvit = {k: _value(val) for k, val in v.items() if k.startswith("MVIT.")}
    unknown = sorted(set(mvit) - MVIT_KEYS)
    if unknown:
        raise ConfigError(f"{source}: {unknown[0]} is not a PySlowFast MVIT key (known: "
                          f"slowfast/config/defaults.py _C.MVIT)")
    values = {**MVIT_DEFAULTS, **mvit}
    for key, (want, why) in _FIXED.items():
        got = _value(v.get(key, want)) if not key.startswith("MVIT.") else values[key]
        if got != want:
            raise ConfigError(f"{source}: {key} = {got!r} is not supported ({why}); set it to "
                              f"{want!r}")
    train_crop = int(v.get("DATA.TRAIN_CROP_SIZE", 224))
    test_crop = int(v.get("DATA.TEST_CROP_SIZE", train_crop))
    if test_crop != train_crop:
        raise ConfigError(f"{source}: DATA.TEST_CROP_SIZE = {test_crop} differs from "
                          f"DATA.TRAIN_CROP_SIZE = {train_crop}; MViT is built for one input "
                          "size (PySlowFast asserts they are equal): set both the same")
    rev = bool(values["MVIT.REV.ENABLE"])
    kwargs = {key[len("MVIT."):].lower().replace(".", "_"): value
              for key, value in values.items()
              if key not in _IGNORED and key not in _FIXED and (rev or key not in _REV_KEYS)}
    if rev:  # PySlowFast's reversible MViT has no class token (it asserts so)
        kwargs["cls_embed_on"] = False
    kwargs.update(frames=int(v.get("DATA.NUM_FRAMES", 8)), crop_size=train_crop,
                  dropout=float(v.get("MODEL.DROPOUT_RATE", 0.5)),
                  in_channels=int(_value(v.get("DATA.INPUT_CHANNEL_NUM", [3]))[0]))
    return kwargs


def _family(kwargs: Dict[str, Any]) -> str:
    """The registered name whose network is nearest: the same version, depth and width."""
    if "rev_buffer_layers" in kwargs:
        return "mvit_rev_b_16x4"
    v2 = kwargs["dim_mul_in_att"] or kwargs["residual_pooling"] or kwargs["rel_pos_spatial"]
    for name, (_, cfg) in MVIT_CONFIGS.items():
        ref = builder_kwargs(cfg)
        if (name.startswith("mvit_v2") == bool(v2) and ref["depth"] == kwargs["depth"]
                and ref["embed_dim"] == kwargs["embed_dim"]):
            return name
    return "mvit_v2_s" if v2 else "mvit_v1_b_16x4"


def mvit_model(v: Dict[str, Any], source: str) -> Tuple[str, List[Any]]:
    """Registered zoo model name and MODEL.KWARGS (``[key, value, ...]``) for a PySlowFast config
    with MODEL.ARCH mvit.

    Args:
        v: The config's flat keys (``"MVIT.DEPTH"``, ``"DATA.NUM_FRAMES"``, ...); MVIT defaults
            are filled in here.
        source: The config's name, for messages.

    Returns:
        ``(name, kwargs)``: ``create_model(name, **dict(zip(kwargs[::2], kwargs[1::2])))``
        builds PySlowFast's network; kwargs list only the values that differ from ``name``'s.
    """
    kwargs = builder_kwargs(v, source)
    name = _family(kwargs)
    ref = builder_kwargs({**MVIT_CONFIGS, **MVIT_REV_CONFIGS}[name][1])
    return name, [x for key, value in kwargs.items() if ref.get(key) != value
                  for x in (key, value)]


def mvit_notes(v: Dict[str, Any]) -> List[str]:
    """What the conversion of a PySlowFast MViT config changes, for the converter's notes."""
    rev = _value(v.get("MVIT.REV.ENABLE", False))
    if rev and _value(v.get("MVIT.CLS_EMBED_ON", MVIT_DEFAULTS["MVIT.CLS_EMBED_ON"])):
        return ["MVIT.CLS_EMBED_ON True with MVIT.REV.ENABLE: PySlowFast's reversible MViT has "
                "no class token (its builder asserts CLS_EMBED_ON is False); built without one"]
    return []
