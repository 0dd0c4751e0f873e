"""PySlowFast's model keys -> a zoo model name and MODEL.KWARGS, one function per family.

``MODEL.MODEL_NAME`` picks PySlowFast's model class and ``MODEL.ARCH`` its layout:

=====================================  ===============================================
PySlowFast                             zoo
=====================================  ===============================================
SlowFast / PTVSlowFast, arch slowfast  ``slowfast_*`` (:mod:`zoo.models.slowfast`)
ResNet / PTVResNet, arch slow          ``slow_8x8_resnet{50,101}``
ResNet, arch i3d / i3d_nopool          ``i3d_resnet50`` (+ depth, pool kwargs)
ResNet, arch c2d / c2d_nopool          ``i3d_resnet50`` with temporal kernels 1
X3D / PTVX3D                           ``x3d_{xs,s,m,l}`` (PTVX3D: + shortcut_bn)
PTVCSN                                 ``ircsn_resnet152`` with the depth's blocks
PTVR2plus1D                            ``r2plus1d_16x4_resnet50`` (+ depth kwarg)
MViT / PTVMViT                         :mod:`zoo.config.pyslowfast_mvit`
=====================================  ===============================================

Non-local blocks (``NONLOCAL.LOCATION``), the temporal-kernel cut (``RESNET.
NUM_BLOCK_TEMP_KERNEL``) and the widths become kwargs; a value zoo's models cannot build is a
one-line ConfigError naming the key. Each function returns ``(name, kwargs, notes)``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from .validation import ConfigError

Model = Tuple[str, List[Any], List[str]]

# Residual blocks per stage of a ResNet of each depth.
STAGE_BLOCKS = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}

# PySlowFast's video_model_builder tables for the single-pathway ResNet: temporal kernel of the
# stem and of conv a per stage (repeated over the blocks), and the max-pool after res2.
_STEM_KT = {"slow": 1, "c2d": 1, "i3d": 5}
_STAGE_KTS = {"slow": ((1,), (1,), (3,), (3,)), "c2d": ((1,), (1,), (1,), (1,)),
              "i3d": ((3,), (3, 1), (3, 1), (1, 3))}
_POOL1_T = {"slow": 1, "c2d": 2, "c2d_nopool": 1, "i3d": 2, "i3d_nopool": 1}

# The SlowFast clip shapes zoo registers a name for, as (slow frames, fast stride, depth):
# slowfast_{T}x{tau}_resnet{depth} in zoo/models/slowfast.py (a test keeps the two in step; this
# layer may not import the models).
SLOWFAST_SHAPES = {(4, 16, 50), (8, 8, 50), (16, 8, 50), (8, 8, 101), (16, 8, 101)}

# Values the ResNet families read only to check they are the ones zoo's models implement.
_RESNET_REQUIRED = {"RESNET.NUM_GROUPS": 1, "RESNET.TRANS_FUNC": "bottleneck_transform",
                    "RESNET.STRIDE_1X1": False}
_STRIDES, _DILATIONS = (1, 2, 2, 2), (1, 1, 1, 1)

# Keys the functions here consume (beside the ones in the defaults table).
MODEL_KEYS = {
    "NONLOCAL.LOCATION", "NONLOCAL.GROUP", "NONLOCAL.INSTANTIATION", "NONLOCAL.POOL",
    "RESNET.NUM_BLOCK_TEMP_KERNEL", "RESNET.SPATIAL_STRIDES", "RESNET.SPATIAL_DILATIONS",
    "RESNET.NUM_GROUPS", "RESNET.TRANS_FUNC", "RESNET.STRIDE_1X1", "RESNET.WIDTH_PER_GROUP",
    "RESNET.ZERO_INIT_FINAL_BN", "RESNET.DEPTH", "DATA.INPUT_CHANNEL_NUM", "MODEL.ARCH",
    "MODEL.MODEL_NAME", "MODEL.DROPOUT_RATE", "MODEL.SINGLE_PATHWAY_ARCH", "SLOWFAST.ALPHA",
    "SLOWFAST.BETA_INV", "SLOWFAST.FUSION_CONV_CHANNEL_RATIO", "SLOWFAST.FUSION_KERNEL_SZ",
    "X3D.WIDTH_FACTOR", "X3D.DEPTH_FACTOR", "X3D.BOTTLENECK_FACTOR", "X3D.DIM_C5", "X3D.DIM_C1",
    "X3D.SCALE_RES2", "X3D.BN_LIN5", "X3D.CHANNELWISE_3x3x3",
}


def _refuse(source: str, key: str, value: Any, want: str) -> ConfigError:
    return ConfigError(f"{source}: {key} = {value!r} is not supported ({want})")


def _check_resnet(v: Dict[str, Any], source: str, pathways: int) -> int:
    """Check the keys zoo's ResNets fix; returns the depth."""
    for key, want in _RESNET_REQUIRED.items():
        if v[key] != want:
            raise _refuse(source, key, v[key], f"zoo's ResNets implement {want!r}")
    for key, want in (("RESNET.SPATIAL_STRIDES", _STRIDES),
                      ("RESNET.SPATIAL_DILATIONS", _DILATIONS)):
        stages = v.get(key)
        if stages and any(int(s) != w for stage, w in zip(stages, want) for s in stage):
            raise _refuse(source, key, stages, f"zoo's ResNets use {list(want)} per stage")
    channels = [int(c) for c in v["DATA.INPUT_CHANNEL_NUM"]]
    if len(channels) != pathways or len(set(channels)) != 1:
        raise _refuse(source, "DATA.INPUT_CHANNEL_NUM", channels,
                      f"one equal entry per pathway: {pathways} for MODEL.ARCH "
                      f"{v['MODEL.ARCH']!r}")
    depth = int(v["RESNET.DEPTH"])
    if depth not in STAGE_BLOCKS:
        raise _refuse(source, "RESNET.DEPTH", depth, f"one of {sorted(STAGE_BLOCKS)}")
    return depth


def _common(v: Dict[str, Any]) -> List[Any]:
    kwargs: List[Any] = ["dropout", float(v["MODEL.DROPOUT_RATE"]),
                         "zero_init_final_bn", bool(v["RESNET.ZERO_INIT_FINAL_BN"]),
                         "width", int(v["RESNET.WIDTH_PER_GROUP"])]
    channels = int(v["DATA.INPUT_CHANNEL_NUM"][0])
    return kwargs + (["in_channels", channels] if channels != 3 else [])


def _temp_blocks(v: Dict[str, Any], depth: int, path: int) -> List[int]:
    """Blocks per stage that keep their temporal kernel (all blocks when the key is absent)."""
    temp = v.get("RESNET.NUM_BLOCK_TEMP_KERNEL")
    if not temp:
        return list(STAGE_BLOCKS[depth])
    return [min(int(stage[path]), n) for stage, n in zip(temp, STAGE_BLOCKS[depth])]


def _nonlocal(v: Dict[str, Any], source: str, path: int) -> Tuple[List[List[int]], List[Any]]:
    """Non-local block indices of pathway ``path`` per stage, and the shared block kwargs."""
    where = [[int(j) for j in stage[path]] if len(stage) > path else []
             for stage in v["NONLOCAL.LOCATION"]]
    if not any(where):
        return where, []
    inst = str(v["NONLOCAL.INSTANTIATION"])
    if inst not in ("softmax", "dot_product"):
        raise _refuse(source, "NONLOCAL.INSTANTIATION", inst, "softmax or dot_product")
    pool = [[int(s) for s in stage[path]] for stage in v["NONLOCAL.POOL"]]
    group = [int(stage[path]) for stage in v["NONLOCAL.GROUP"]]
    kwargs: List[Any] = ["nonlocal_instantiation", inst, "nonlocal_pool", pool]
    return where, kwargs + (["nonlocal_group", group] if any(g != 1 for g in group) else [])


def slowfast_model(v: Dict[str, Any], source: str) -> Model:
    """PySlowFast's SlowFast (and PTVSlowFast): ``slowfast_{T}x{tau}_resnet{depth}``."""
    depth = _check_resnet(v, source, 2)
    frames, rate, alpha = int(v["DATA.NUM_FRAMES"]), int(v["DATA.SAMPLING_RATE"]), \
        int(v["SLOWFAST.ALPHA"])
    kwargs = _common(v) + [
        "beta_inv", int(v["SLOWFAST.BETA_INV"]),
        "fusion_conv_channel_ratio", int(v["SLOWFAST.FUSION_CONV_CHANNEL_RATIO"]),
        "fusion_kernel", int(v["SLOWFAST.FUSION_KERNEL_SZ"]),
        "num_block_temp_kernel", _temp_blocks(v, depth, 0)]
    fast_temp = _temp_blocks(v, depth, 1)
    if fast_temp != kwargs[-1]:
        kwargs += ["fast_num_block_temp_kernel", fast_temp]
    slow_nl, nl_kwargs = _nonlocal(v, source, 0)
    fast_nl, fast_kwargs = _nonlocal(v, source, 1)
    if any(slow_nl):
        kwargs += ["nonlocal_blocks", slow_nl]
    if any(fast_nl):
        kwargs += ["fast_nonlocal_blocks", fast_nl]
    kwargs += nl_kwargs or fast_kwargs
    notes = []
    if str(v["MODEL.MODEL_NAME"]).startswith("PTV"):
        notes.append(f"MODEL.MODEL_NAME {v['MODEL.MODEL_NAME']}: zoo builds PySlowFast's layout "
                     "of the same net (PyTorchVideo's files load into it)")
    # The kwargs fix every part of the layout a clip shape changes (alpha among them), so a shape
    # with no registered name is the registered net of its depth with them.
    shape = (frames // alpha, rate * alpha, depth)
    name = "slowfast_{}x{}_resnet{}".format(*shape)
    if shape not in SLOWFAST_SHAPES:
        base = f"slowfast_8x8_resnet{depth}" if (8, 8, depth) in SLOWFAST_SHAPES else \
            "slowfast_8x8_resnet50"
        kwargs += [] if base.endswith(f"resnet{depth}") else ["depth", depth]
        notes.append(f"DATA.NUM_FRAMES {frames}, DATA.SAMPLING_RATE {rate}, SLOWFAST.ALPHA "
                     f"{alpha}, RESNET.DEPTH {depth}: zoo registers no {name}; built as {base} "
                     "with this config's layout as MODEL.KWARGS (the same net; list_models' "
                     f"FLOPs are for {base}'s clip)")
        name = base
    return name, kwargs + ["alpha", alpha], notes


def resnet_model(v: Dict[str, Any], source: str) -> Model:
    """PySlowFast's single-pathway ResNet (ARCH slow, c2d, c2d_nopool, i3d, i3d_nopool)."""
    arch = str(v["MODEL.ARCH"]).lower()
    if str(v["MODEL.MODEL_NAME"]) == "ResNet_nopool" and not arch.endswith("_nopool"):
        arch += "_nopool"
    if arch not in _POOL1_T:
        raise _refuse(source, "MODEL.ARCH", v["MODEL.ARCH"],
                      "zoo converts slowfast, slow, c2d, c2d_nopool, i3d, i3d_nopool, x3d, csn, "
                      "r2plus1d and mvit")
    depth = _check_resnet(v, source, 1)
    base = arch.replace("_nopool", "")
    kwargs = _common(v) + ["depth", depth, "stem_kt", _STEM_KT[base],
                           "stage_kts", [list(k) for k in _STAGE_KTS[base]],
                           "pool1_t", _POOL1_T[arch]]
    temp = _temp_blocks(v, depth, 0)
    if temp != list(STAGE_BLOCKS[depth]):
        kwargs += ["num_block_temp_kernel", temp]
    where, nl_kwargs = _nonlocal(v, source, 0)
    if any(where):
        kwargs += ["nonlocal_blocks", where] + nl_kwargs
    name = f"slow_8x8_resnet{depth}" if base == "slow" and depth in (50, 101) else "i3d_resnet50"
    notes = [] if name.startswith(base) else [
        f"MODEL.ARCH {arch} R{depth}: built as zoo's {name} with PySlowFast's {arch} kernel "
        "table, pool and depth as MODEL.KWARGS"]
    return name, kwargs, notes


def x3d_model(v: Dict[str, Any], source: str) -> Model:
    """PySlowFast's X3D: the ``x3d_*`` size whose clip the config samples, with its factors."""
    for key, want in (("X3D.DIM_C1", 12), ("X3D.SCALE_RES2", False), ("X3D.BN_LIN5", False),
                      ("X3D.CHANNELWISE_3x3x3", True), ("RESNET.TRANS_FUNC", "x3d_transform")):
        if key in v and v[key] != want:
            raise _refuse(source, key, v[key], f"zoo's X3D implements {want!r}")
    depth_factor = float(v["X3D.DEPTH_FACTOR"])
    frames, crop = int(v["DATA.NUM_FRAMES"]), int(v["DATA.TRAIN_CROP_SIZE"])
    if depth_factor >= 5.0:
        size = "l"
    else:
        size = "xs" if frames <= 4 else "s" if crop <= 160 else "m"
    kwargs: List[Any] = ["width_factor", float(v["X3D.WIDTH_FACTOR"]),
                         "depth_factor", depth_factor,
                         "bottleneck_factor", float(v["X3D.BOTTLENECK_FACTOR"]),
                         "head_width", int(v["X3D.DIM_C5"]),
                         "dropout", float(v["MODEL.DROPOUT_RATE"])]
    if str(v["MODEL.MODEL_NAME"]) == "PTVX3D":
        # PyTorchVideo's create_x3d: no BN after res2.0's shortcut conv (its width stays the same)
        kwargs += ["shortcut_bn", "width_change"]
    return f"x3d_{size}", kwargs, []


def csn_model(v: Dict[str, Any], source: str) -> Model:
    """PyTorchVideo's CSN (PTVCSN): zoo's ir-CSN with the depth's blocks per stage."""
    depth = int(v["RESNET.DEPTH"])
    if depth not in STAGE_BLOCKS:
        raise _refuse(source, "RESNET.DEPTH", depth, f"one of {sorted(STAGE_BLOCKS)}")
    kwargs: List[Any] = ["layers", list(STAGE_BLOCKS[depth]),
                         "width", int(v["RESNET.WIDTH_PER_GROUP"]),
                         "dropout", float(v["MODEL.DROPOUT_RATE"])]
    return "ircsn_resnet152", kwargs, [f"MODEL.MODEL_NAME PTVCSN R{depth}: zoo's "
                                       "ircsn_resnet152 with layers "
                                       f"{list(STAGE_BLOCKS[depth])} (PyTorchVideo's CSN "
                                       "weights do not load into it: zoo's PyTorchVideo "
                                       "converter does not cover CSN)"]


def r2plus1d_model(v: Dict[str, Any], source: str) -> Model:
    """PyTorchVideo's R(2+1)D (PTVR2plus1D): ``r2plus1d_16x4_resnet50`` with the depth's blocks."""
    depth = int(v["RESNET.DEPTH"])
    if depth not in (50, 101, 152):
        raise _refuse(source, "RESNET.DEPTH", depth, "PyTorchVideo's R(2+1)D has 50, 101, 152")
    kwargs = _common(v) + (["depth", depth] if depth != 50 else [])
    return "r2plus1d_16x4_resnet50", kwargs, []


def model(v: Dict[str, Any], source: str) -> Tuple[str, List[Any], List[str], set]:
    """Zoo model name, MODEL.KWARGS, notes and the extra keys consumed, for any family."""
    name = str(v["MODEL.MODEL_NAME"])
    arch = str(v["MODEL.ARCH"]).lower()
    if name in ("MViT", "PTVMViT") or arch == "mvit":
        from .pyslowfast_mvit import MVIT_KEYS, mvit_model, mvit_notes

        zoo_name, kwargs = mvit_model(v, source)
        return zoo_name, kwargs, mvit_notes(v), set(MVIT_KEYS)
    if name in ("X3D", "PTVX3D") or arch == "x3d":
        return (*x3d_model(v, source), set())
    if name == "PTVCSN" or arch == "csn":
        return (*csn_model(v, source), set())
    if name == "PTVR2plus1D" or arch == "r2plus1d":
        return (*r2plus1d_model(v, source), set())
    if arch == "slowfast":
        return (*slowfast_model(v, source), set())
    return (*resnet_model(v, source), set())
