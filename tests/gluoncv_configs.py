"""The key sets of gluon-cv's action-recognition YAMLs, rendered from a table of their values.

gluon-cv ships 48 YAMLs in ``scripts/action-recognition/configuration/`` (dmlc/gluon-cv). This
module does not copy them: ``CONFIGS`` records, per file, the values that vary (model name,
dataset, clip, schedule, ...) and ``render`` writes a YAML with the same sections, keys, nesting
and value types (``PRETRAINED: True/False`` as YAML booleans, ``W_DECAY: 1e-4`` which YAML reads
as a string, the misspelt ``WOLRD_URLS`` with a cloud address, ``INFERENCE: FEAT: True`` for the
six ``*_feat`` files).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Tuple


class Raw(str):
    """A value written as is (YAML then reads ``1e-4`` as the string '1e-4', as in gluoncv)."""


# Data sets: annotation lists and data roots, and the class count.
_K400 = ("kinetics400/k400_{}.txt", "kinetics400/{}_256/", 400)
_K700 = ("kinetics700_v1/k700_v1_{}.txt", "kinetics700_v1/{}_256/", 700)
_STH = ("sthsthv2/sthsthv2_{}.txt", "sthsthv2/20bn-something-something-v2/", 174)


def _step(epochs=100, lr=0.01, wd="1e-4", milestones=(40, 80), policy=False, custom=False):
    """gluoncv's step recipes (``policy``: the file writes LR_POLICY 'Step')."""
    t: List[Tuple[str, Any]] = [("EPOCH_NUM", epochs), ("BATCH_SIZE", 8), ("LR", lr)]
    if policy and not custom:
        t.append(("LR_POLICY", "Step"))
    t += [("MOMENTUM", 0.9), ("W_DECAY", Raw(wd))]
    if custom:
        t += [("LR_POLICY", "Step"), ("USE_WARMUP", False)]
    return t + [("LR_MILESTONE", list(milestones)), ("STEP", 0.1)]


def _cosine(lr=0.01, wd="1e-4", warmup=34, epochs=196, use_warmup=False, end_lr=True):
    """gluoncv's cosine recipes (``use_warmup``: the file writes USE_WARMUP True)."""
    t: List[Tuple[str, Any]] = [("EPOCH_NUM", epochs), ("BATCH_SIZE", 8), ("LR", lr),
                                ("MOMENTUM", 0.9), ("W_DECAY", Raw(wd))]
    if use_warmup:
        t.append(("USE_WARMUP", True))
    t += [("WARMUP_EPOCHS", warmup), ("LR_POLICY", "Cosine")]
    if end_lr:
        t.append(("WARMUP_END_LR", 0.1))
    return t + [("RESUME_EPOCH", -1)]


_TPN = _step(epochs=150, milestones=(75, 125))


def _row(model, data, clip, rate, train=None, seg=1, test_seg=10, keep=False, small=False,
         pretrained=False, freq=(2, 2), display=None, multigrid=False, base=None):
    return dict(model=model, data=data, clip=clip, rate=rate, train=train, seg=seg,
                test_seg=test_seg, keep=keep, small=small, pretrained=pretrained, freq=freq,
                display=display, multigrid=multigrid, base=base or model)


# file stem -> the values that file carries.
CONFIGS: Dict[str, Dict[str, Any]] = {
    "i3d_nl10_resnet101_v1_kinetics400": _row("i3d_nl10_resnet101_v1_kinetics400", _K400, 32, 2,
                                              _step()),
    "i3d_nl10_resnet50_v1_kinetics400": _row("i3d_nl10_resnet50_v1_kinetics400", _K400, 32, 2,
                                             _step()),
    "i3d_nl5_resnet101_v1_kinetics400": _row("i3d_nl5_resnet101_v1_kinetics400", _K400, 32, 2,
                                             _step()),
    "i3d_nl5_resnet50_v1_kinetics400": _row("i3d_nl5_resnet50_v1_kinetics400", _K400, 32, 2,
                                            _step()),
    "i3d_resnet101_v1_kinetics400": _row("i3d_resnet101_v1_kinetics400", _K400, 32, 2, _step()),
    "i3d_resnet50_v1_custom": _row("i3d_resnet50_v1_custom", _STH, 32, 2,
                                   _step(wd="1e-5", custom=True), pretrained=True),
    "i3d_resnet50_v1_feat": _row("i3d_resnet50_v1_kinetics400", _K400, 32, 2, pretrained=True),
    "i3d_resnet50_v1_kinetics400": _row("i3d_resnet50_v1_kinetics400", _K400, 32, 2, _step()),
    "i3d_resnet50_v1_sthsthv2": _row("i3d_resnet50_v1_sthsthv2", _STH, 16, 2,
                                     _step(policy=True), test_seg=2),
    "i3d_slow_resnet101_f16s4_kinetics400": _row("i3d_slow_resnet101_f16s4_kinetics400", _K400,
                                                 16, 4, _cosine()),
    "i3d_slow_resnet101_f16s4_kinetics700": _row(
        "i3d_slow_resnet101_f16s4_kinetics700", _K700, 16, 4,
        _cosine(lr=0.1, use_warmup=True, end_lr=False), keep=True, freq=(5, 5), display=50),
    "i3d_slow_resnet101_f32s2_kinetics400": _row("i3d_slow_resnet101_f32s2_kinetics400", _K400,
                                                 32, 2, _cosine()),
    "i3d_slow_resnet101_f8s8_kinetics400": _row("i3d_slow_resnet101_f8s8_kinetics400", _K400, 8,
                                                8, _cosine()),
    "i3d_slow_resnet50_f16s4_kinetics400": _row("i3d_slow_resnet50_f16s4_kinetics400", _K400, 16,
                                                4, _cosine()),
    "i3d_slow_resnet50_f32s2_custom": _row(
        "i3d_slow_resnet50_f32s2_custom", _STH, 32, 2,
        _cosine(lr=0.1, use_warmup=True, end_lr=False), pretrained=True, freq=(5, 5), display=50),
    "i3d_slow_resnet50_f32s2_feat": _row("i3d_slow_resnet50_f32s2_kinetics400", _K400, 32, 2,
                                         pretrained=True),
    "i3d_slow_resnet50_f32s2_kinetics400": _row("i3d_slow_resnet50_f32s2_kinetics400", _K400,
                                                32, 2, _cosine()),
    "i3d_slow_resnet50_f8s8_kinetics400": _row(
        "i3d_slow_resnet50_f8s8_kinetics400", _K400, 8, 8,
        _cosine(wd="1e-5", use_warmup=True, end_lr=False), freq=(5, 5),
        base="i3d_slow_resnet50_f8s8_kinetics400_warmup"),
    "ircsn_v2_resnet152_f32s2_kinetics400": _row(
        "ircsn_v2_resnet152_f32s2_kinetics400", _K400, 32, 2,
        _step(epochs=58, lr=0.000125, milestones=(32, 48), policy=True), keep=True),
    "r2plus1d_v1_resnet18_kinetics400": _row("r2plus1d_v1_resnet18_kinetics400", _K400, 16, 2,
                                             _cosine(lr=0.001), small=True),
    "r2plus1d_v1_resnet34_kinetics400": _row("r2plus1d_v1_resnet34_kinetics400", _K400, 16, 2,
                                             _cosine(lr=0.001), small=True),
    "r2plus1d_v1_resnet50_custom": _row("r2plus1d_v1_resnet50_custom", _STH, 16, 2,
                                        _cosine(lr=0.001, wd="1e-5", use_warmup=True),
                                        small=True, pretrained=True),
    "r2plus1d_v1_resnet50_feat": _row("r2plus1d_v1_resnet50_kinetics400", _K400, 16, 2,
                                      small=True, pretrained=True),
    "r2plus1d_v1_resnet50_kinetics400": _row("r2plus1d_v1_resnet50_kinetics400", _K400, 16, 2,
                                             _cosine(lr=0.001), small=True),
    "r2plus1d_v2_resnet152_kinetics400": _row(
        "r2plus1d_v2_resnet152_kinetics400", _K400, 32, 2,
        _cosine(lr=0.1, use_warmup=True, end_lr=False), keep=True, small=True, freq=(5, 5),
        display=50),
    "resnet101_v1b_kinetics400": _row("resnet101_v1b_kinetics400", _K400, 1, 1,
                                      _step(policy=True), seg=7),
    "resnet152_v1b_kinetics400": _row("resnet152_v1b_kinetics400", _K400, 1, 1, _step(), seg=7,
                                      test_seg=25),
    "resnet18_v1b_kinetics400": _row("resnet18_v1b_kinetics400", _K400, 1, 1, _step(), seg=7,
                                     test_seg=25),
    "resnet34_v1b_kinetics400": _row("resnet34_v1b_kinetics400", _K400, 1, 1, _step(), seg=7,
                                     test_seg=25),
    "resnet50_v1b_custom": _row("resnet50_v1b_custom", _STH, 1, 1,
                                _step(wd="1e-5", custom=True), seg=7, pretrained=True),
    "resnet50_v1b_feat": _row("resnet50_v1b_kinetics400", _K400, 1, 1, pretrained=True),
    "resnet50_v1b_kinetics400": _row("resnet50_v1b_kinetics400", _K400, 1, 1,
                                     _step(policy=True), seg=7),
    "resnet50_v1b_sthsthv2": _row("resnet50_v1b_sthsthv2", _STH, 1, 1,
                                  _step(epochs=30, milestones=(10, 20), policy=True), seg=8,
                                  test_seg=8),
    "slowfast_16x8_resnet50_sthsthv2": _row(
        "slowfast_16x8_resnet50_sthsthv2", _STH, 64, 2,
        _cosine(lr=0.0001, wd="1e-6", warmup=5, epochs=30), test_seg=2),
    "slowfast_4x16_resnet50_custom": _row("slowfast_4x16_resnet50_custom", _STH, 32, 2,
                                          _cosine(wd="1e-5", use_warmup=True), pretrained=True),
    "slowfast_4x16_resnet50_feat": _row("slowfast_4x16_resnet50_kinetics400", _K400, 32, 2),
    "slowfast_4x16_resnet50_kinetics400": _row("slowfast_4x16_resnet50_kinetics400", _K400, 32,
                                               2, _cosine()),
    # This file names the 16x8 model and turns MULTIGRID on (as in gluon-cv).
    "slowfast_4x16_resnet50_sthsthv2": _row(
        "slowfast_16x8_resnet50_sthsthv2", _STH, 128, 2,
        [("EPOCH_NUM", 196), ("BATCH_SIZE", 8), ("LR", 0.1), ("MOMENTUM", 0.9),
         ("W_DECAY", Raw("1e-4")), ("LR_MILESTONE", [60, 120, 150]), ("STEP", 0.1)],
        test_seg=2, pretrained=True, multigrid=True),
    "slowfast_8x8_resnet101_kinetics400": _row("slowfast_8x8_resnet101_kinetics400", _K400, 32,
                                               2, _cosine()),
    "slowfast_8x8_resnet50_kinetics400": _row("slowfast_8x8_resnet50_kinetics400", _K400, 32, 2,
                                              _cosine()),
    "tpn_resnet101_f16s4_kinetics400": _row("tpn_resnet101_f16s4_kinetics400", _K400, 16, 4,
                                            _TPN),
    "tpn_resnet101_f32s2_kinetics400": _row("tpn_resnet101_f32s2_kinetics400", _K400, 32, 2,
                                            _TPN),
    "tpn_resnet101_f8s8_kinetics400": _row("tpn_resnet101_f8s8_kinetics400", _K400, 8, 8, _TPN),
    "tpn_resnet50_f16s4_kinetics400": _row("tpn_resnet50_f16s4_kinetics400", _K400, 16, 4, _TPN),
    "tpn_resnet50_f32s2_custom": _row("tpn_resnet50_f32s2_custom", _K400, 32, 2,
                                      _step(epochs=150, wd="1e-5", milestones=(75, 125),
                                            custom=True), pretrained=True),
    "tpn_resnet50_f32s2_feat": _row("tpn_resnet50_f32s2_kinetics400", _K400, 32, 2,
                                    pretrained=True),
    "tpn_resnet50_f32s2_kinetics400": _row("tpn_resnet50_f32s2_kinetics400", _K400, 32, 2, _TPN),
    "tpn_resnet50_f8s8_kinetics400": _row("tpn_resnet50_f8s8_kinetics400", _K400, 8, 8, _TPN),
}

FEAT_CONFIGS = sorted(k for k in CONFIGS if k.endswith("_feat"))


def _value(v: Any) -> str:
    if isinstance(v, Raw):
        return str(v)
    if isinstance(v, bool):
        return "True" if v else "False"
    if isinstance(v, str):
        return f"'{v}'"
    if isinstance(v, list):
        return "[" + ", ".join(_value(x) for x in v) + "]"
    return repr(v)


def _block(name: str, pairs, indent: str = "    ") -> List[str]:
    return [f"  {name}:"] + [f"{indent}{k}: {_value(v)}" for k, v in pairs] + [""]


def render(stem: str) -> str:
    """The YAML text of gluon-cv's ``<stem>.yaml`` (same keys, nesting and value types)."""
    c = CONFIGS[stem]
    feat = stem.endswith("_feat")
    ip = "172.31.72.195"
    lines = [f"# {stem}", "", "DDP_CONFIG:"]
    lines += [f"  {k}: {_value(v)}" for k, v in (
        ("WORLD_SIZE", 1), ("WORLD_RANK", 0), ("GPU_WORLD_SIZE", 8), ("GPU_WORLD_RANK", 0),
        ("DIST_URL", f"tcp://{ip}:23456"), ("WOLRD_URLS", [ip]), ("AUTO_RANK_MATCH", True),
        ("DIST_BACKEND", "nccl"), ("GPU", 0), ("DISTRIBUTED", True))]
    lines += ["", "CONFIG:"]
    anno, root, classes = c["data"]
    home = "/home/ubuntu/data/"
    if feat:
        lines += _block("INFERENCE", [("FEAT", True)])
        data = [("VAL_ANNO_PATH", home + anno.format("val")),
                ("VAL_DATA_PATH", home + root.format("val"))]
    else:
        lines += _block("TRAIN", c["train"])
        lines += _block("VAL", [("FREQ", c["freq"][0]), ("BATCH_SIZE", 8)])
        data = [("TRAIN_ANNO_PATH", home + anno.format("train")),
                ("VAL_ANNO_PATH", home + anno.format("val")),
                ("TRAIN_DATA_PATH", home + root.format("train")),
                ("VAL_DATA_PATH", home + root.format("val"))]
    data += [("NUM_CLASSES", classes), ("CLIP_LEN", c["clip"]), ("FRAME_RATE", c["rate"]),
             ("NUM_SEGMENT", c["seg"]), ("NUM_CROP", 1)]
    if not feat or stem == "i3d_slow_resnet50_f32s2_feat":
        data += [("TEST_NUM_SEGMENT", c["test_seg"]), ("TEST_NUM_CROP", 3)]
    data += [("MULTIGRID", c["multigrid"]), ("KEEP_ASPECT_RATIO", c["keep"])]
    if c["small"]:
        data += [("CROP_SIZE", 112), ("SHORT_SIDE_SIZE", 128), ("NEW_HEIGHT", 128),
                 ("NEW_WIDTH", 171)]
    lines += _block("DATA", data)
    lines += _block("MODEL", [("NAME", c["model"]), ("PRETRAINED", c["pretrained"])])
    base = f"./logs/{c['base']}"
    if feat:
        log = [("BASE_PATH", base), ("SAVE_DIR", "features")]
    else:
        log = [("BASE_PATH", base), ("LOG_DIR", "tb_log"), ("SAVE_DIR", "checkpoints"),
               ("EVAL_DIR", f"{base}/eval")]
        if c["display"]:
            log.append(("DISPLAY_FREQ", c["display"]))
        log.append(("SAVE_FREQ", c["freq"][1]))
    lines += _block("LOG", log)
    return "\n".join(lines)


def write_all(folder: str) -> Dict[str, str]:
    """Write every config as ``folder/<stem>.yaml``; returns stem -> path."""
    os.makedirs(folder, exist_ok=True)
    paths = {}
    for stem in CONFIGS:
        path = os.path.join(folder, f"{stem}.yaml")
        with open(path, "w", encoding="utf-8") as f:
            f.write(render(stem) + "\n")
        paths[stem] = path
    return paths


def expected_classes(stem: str) -> int:
    """The class count the file sets (400 / 700 / 174 from the data set it trains on)."""
    return CONFIGS[stem]["data"][2]
