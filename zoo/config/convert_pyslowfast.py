"""PySlowFast YAML -> zoo config: the same model, input, solver, schedule, batch and test views.

``convert_pyslowfast(data)`` takes the mapping of a PySlowFast YAML (``slowfast/config/defaults.py``
fills the keys a file leaves out; the ones that matter are in ``_DEFAULTS``) and returns the zoo
config as a nested dict, the PySlowFast keys that have no zoo counterpart, and notes on values
zoo reads differently. ``tools/convert_config.py`` is the command line.

PySlowFast's ``TRAIN.BATCH_SIZE`` and ``TEST.BATCH_SIZE`` are global (split over ``NUM_GPUS x
NUM_SHARDS`` processes); zoo's are per process, so they are divided, and
``TRAIN.REFERENCE_BATCH`` keeps the LR recipe when the job runs on fewer or more processes.
"""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from .tree import flatten_cfg
from .validation import ConfigError

# Top-level keys only PySlowFast writes (zoo and gluoncv YAMLs have CONFIG / DDP_CONFIG), and keys
# inside the sections both use that only PySlowFast has.
_SECTIONS = ("SOLVER", "SLOWFAST", "RESNET", "BN", "DATA_LOADER", "NONLOCAL", "NUM_GPUS",
             "NUM_SHARDS", "RNG_SEED", "OUTPUT_DIR", "X3D", "MVIT", "DETECTION", "AVA",
             "TENSORBOARD", "MULTIGRID", "DEMO")
_INNER = (("MODEL", "ARCH"), ("MODEL", "MODEL_NAME"), ("DATA", "NUM_FRAMES"),
          ("DATA", "SAMPLING_RATE"), ("TRAIN", "ENABLE"), ("TEST", "ENABLE"))

# PySlowFast defaults (slowfast/config/defaults.py) for the keys the conversion reads.
_DEFAULTS: Dict[str, Any] = {
    "TRAIN.BATCH_SIZE": 64, "TRAIN.EVAL_PERIOD": 10, "TRAIN.CHECKPOINT_PERIOD": 10,
    "TRAIN.AUTO_RESUME": False, "TEST.BATCH_SIZE": 8, "TEST.NUM_ENSEMBLE_VIEWS": 10,
    "TEST.NUM_SPATIAL_CROPS": 3, "DATA.NUM_FRAMES": 8, "DATA.SAMPLING_RATE": 8,
    "DATA.TRAIN_JITTER_SCALES": [256, 320], "DATA.TRAIN_CROP_SIZE": 224,
    "DATA.TEST_CROP_SIZE": 256, "DATA.MEAN": [0.45, 0.45, 0.45], "DATA.STD": [0.225, 0.225, 0.225],
    "SLOWFAST.ALPHA": 8, "SLOWFAST.BETA_INV": 8, "SLOWFAST.FUSION_CONV_CHANNEL_RATIO": 2,
    "SLOWFAST.FUSION_KERNEL_SZ": 5, "RESNET.DEPTH": 50, "RESNET.WIDTH_PER_GROUP": 64,
    "RESNET.NUM_GROUPS": 1, "RESNET.ZERO_INIT_FINAL_BN": False,
    "RESNET.TRANS_FUNC": "bottleneck_transform", "RESNET.STRIDE_1X1": False,
    "BN.USE_PRECISE_STATS": False, "BN.NUM_BATCHES_PRECISE": 200, "BN.MOMENTUM": 0.1,
    "BN.WEIGHT_DECAY": 0.0, "SOLVER.BASE_LR": 0.1, "SOLVER.LR_POLICY": "cosine",
    "SOLVER.COSINE_END_LR": 0.0, "SOLVER.COSINE_AFTER_WARMUP": False, "SOLVER.GAMMA": 0.1,
    "SOLVER.STEPS": [], "SOLVER.LRS": [], "SOLVER.MAX_EPOCH": 300, "SOLVER.MOMENTUM": 0.9,
    "SOLVER.DAMPENING": 0.0, "SOLVER.NESTEROV": True, "SOLVER.WEIGHT_DECAY": 1e-4,
    "SOLVER.WARMUP_EPOCHS": 0.0, "SOLVER.WARMUP_START_LR": 0.01,
    "SOLVER.OPTIMIZING_METHOD": "sgd", "MODEL.NUM_CLASSES": 400, "MODEL.ARCH": "slowfast",
    "MODEL.MODEL_NAME": "SlowFast", "MODEL.LOSS_FUNC": "cross_entropy",
    "MODEL.DROPOUT_RATE": 0.5, "DATA_LOADER.NUM_WORKERS": 8, "NUM_GPUS": 1, "NUM_SHARDS": 1,
    "RNG_SEED": 1, "OUTPUT_DIR": "./tmp",
}

# Residual blocks per stage of a ResNet of each depth.
_STAGE_BLOCKS = {18: (2, 2, 2, 2), 50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}

# Keys read for their value only to check it is the one zoo's models implement.
_REQUIRED = {
    "RESNET.NUM_GROUPS": 1, "RESNET.TRANS_FUNC": "bottleneck_transform", "RESNET.STRIDE_1X1": False,
    "RESNET.SPATIAL_STRIDES": [[1, 1], [2, 2], [2, 2], [2, 2]],
    "RESNET.SPATIAL_DILATIONS": [[1, 1], [1, 1], [1, 1], [1, 1]],
    "MODEL.LOSS_FUNC": "cross_entropy", "DATA.INPUT_CHANNEL_NUM": [3, 3],
}

# Keys whose meaning the conversion carries (to a zoo key, the model name, or a check).
_CONSUMED = set(_DEFAULTS) | set(_REQUIRED) | {
    "TRAIN.ENABLE", "TEST.ENABLE", "TRAIN.DATASET", "TEST.DATASET", "NONLOCAL.LOCATION",
    "NONLOCAL.GROUP", "NONLOCAL.INSTANTIATION", "RESNET.NUM_BLOCK_TEMP_KERNEL",
    "DATA.PATH_TO_DATA_DIR", "DATA.PATH_PREFIX",
}


def is_pyslowfast_yaml(data: Any) -> bool:
    """True for a YAML mapping laid out like PySlowFast's (top-level TRAIN / SOLVER / MODEL ...)."""
    if not isinstance(data, dict) or "CONFIG" in data or "DDP_CONFIG" in data:
        return False
    return any(k in data for k in _SECTIONS) or any(
        isinstance(data.get(section), dict) and key in data[section] for section, key in _INNER)


def _model(v: Dict[str, Any], source: str) -> Tuple[str, List[Any]]:
    """Zoo model name and MODEL.KWARGS for the PySlowFast architecture."""
    for key, want in _REQUIRED.items():
        if key in v and v[key] != want:
            raise ConfigError(f"{source}: {key} = {v[key]!r} is not supported (zoo's models "
                              f"implement {want!r})")
    if any(loc for pair in v.get("NONLOCAL.LOCATION", []) for loc in pair):
        raise ConfigError(f"{source}: NONLOCAL.LOCATION adds non-local blocks, which zoo's "
                          "SlowFast/Slow models do not have")
    arch, depth = str(v["MODEL.ARCH"]).lower(), int(v["RESNET.DEPTH"])
    frames, rate, alpha = int(v["DATA.NUM_FRAMES"]), int(v["DATA.SAMPLING_RATE"]), 1
    kwargs: List[Any] = ["dropout", float(v["MODEL.DROPOUT_RATE"]),
                         "zero_init_final_bn", bool(v["RESNET.ZERO_INIT_FINAL_BN"]),
                         "width", int(v["RESNET.WIDTH_PER_GROUP"])]
    temp = v.get("RESNET.NUM_BLOCK_TEMP_KERNEL")
    if temp and tuple(int(s[0]) for s in temp) != _STAGE_BLOCKS.get(depth):
        kwargs += ["num_block_temp_kernel", [int(s[0]) for s in temp]]
    if arch == "slowfast":
        alpha = int(v["SLOWFAST.ALPHA"])
        name = f"slowfast_{frames // alpha}x{rate * alpha}_resnet{depth}"
        kwargs += ["beta_inv", int(v["SLOWFAST.BETA_INV"]),
                   "fusion_conv_channel_ratio", int(v["SLOWFAST.FUSION_CONV_CHANNEL_RATIO"]),
                   "fusion_kernel", int(v["SLOWFAST.FUSION_KERNEL_SZ"])]
    elif arch in ("slow", "c2d"):
        name = f"slow_{frames}x{rate}_resnet{depth}"
    elif arch == "i3d":
        name = f"i3d_resnet{depth}"
    else:
        raise ConfigError(f"{source}: MODEL.ARCH = {v['MODEL.ARCH']!r} has no zoo counterpart "
                          "(zoo converts slowfast, slow and i3d ResNets)")
    return name, kwargs


def _solver(v: Dict[str, Any], source: str, notes: List[str]) -> Dict[str, Any]:
    policy = str(v["SOLVER.LR_POLICY"])
    base_lr, warmup = float(v["SOLVER.BASE_LR"]), float(v["SOLVER.WARMUP_EPOCHS"])
    train: Dict[str, Any] = {
        "EPOCH_NUM": int(v["SOLVER.MAX_EPOCH"]), "LR": base_lr,
        "MOMENTUM": float(v["SOLVER.MOMENTUM"]), "W_DECAY": float(v["SOLVER.WEIGHT_DECAY"]),
        "USE_WARMUP": warmup > 0, "WARMUP_EPOCHS": warmup,
        "WARMUP_START_LR": float(v["SOLVER.WARMUP_START_LR"]), "WARMUP_END_LR": base_lr,
    }
    method = str(v["SOLVER.OPTIMIZING_METHOD"]).lower()
    if method not in ("sgd", "adamw"):
        raise ConfigError(f"{source}: SOLVER.OPTIMIZING_METHOD = {method!r} has no zoo "
                          "counterpart (zoo has sgd and adamw)")
    train["OPTIMIZER"] = "SGD" if method == "sgd" else "AdamW"
    if policy == "cosine":
        train["LR_POLICY"] = "Cosine"
        if float(v["SOLVER.COSINE_END_LR"]) != 0.0:
            notes.append(f"SOLVER.COSINE_END_LR {v['SOLVER.COSINE_END_LR']}: zoo's cosine ends "
                         "at 0")
        if warmup > 0 and not v["SOLVER.COSINE_AFTER_WARMUP"]:
            notes.append("SOLVER.COSINE_AFTER_WARMUP False: PySlowFast's cosine spans all "
                         "MAX_EPOCH epochs and the warmup ends on it; zoo's cosine starts at LR "
                         "after the warmup (PySlowFast's COSINE_AFTER_WARMUP True)")
    elif policy == "steps_with_relative_lrs":
        steps, lrs = list(v["SOLVER.STEPS"]), [float(x) for x in v["SOLVER.LRS"]]
        ratios = {round(b / a, 9) for a, b in zip(lrs, lrs[1:])} if len(lrs) > 1 else {0.1}
        if len(ratios) != 1 or len(steps) < len(lrs) or lrs[0] <= 0:
            raise ConfigError(f"{source}: SOLVER.LRS {lrs} is not a constant ratio per step; "
                              "zoo's Step policy multiplies the LR by CONFIG.TRAIN.STEP at each "
                              "milestone")
        train.update(LR_POLICY="Step", LR=base_lr * lrs[0], WARMUP_END_LR=base_lr * lrs[0],
                     LR_MILESTONE=[int(s) for s in steps[1:len(lrs)]], STEP=ratios.pop())
    else:
        raise ConfigError(f"{source}: SOLVER.LR_POLICY = {policy!r} has no zoo counterpart "
                          "(zoo converts cosine and steps_with_relative_lrs)")
    if v["SOLVER.NESTEROV"] and method == "sgd":
        notes.append("SOLVER.NESTEROV True (PySlowFast's default): zoo's SGD uses plain momentum")
    return train


def _batches(v: Dict[str, Any], views: int, notes: List[str]) -> Tuple[int, int, int]:
    procs = max(1, int(v["NUM_GPUS"]) * int(v["NUM_SHARDS"]))
    train = max(1, int(v["TRAIN.BATCH_SIZE"]) // procs)
    # PySlowFast counts test clips; zoo's TEST.BATCH_SIZE counts videos of `views` clips each.
    test = max(1, int(v["TEST.BATCH_SIZE"]) // procs // views)
    notes.append(f"TRAIN.BATCH_SIZE {v['TRAIN.BATCH_SIZE']} is global over NUM_GPUS x NUM_SHARDS "
                 f"= {procs} processes: zoo's per-process CONFIG.TRAIN.BATCH_SIZE is {train}, and "
                 f"CONFIG.TRAIN.REFERENCE_BATCH {train * procs} scales the LR linearly on other "
                 "process counts")
    return train, test, procs


def _data(v: Dict[str, Any], notes: List[str]) -> Dict[str, Any]:
    """CONFIG.DATA: clip, crops, scale jitter, normalisation, test views, lists."""
    scales = [int(s) for s in v["DATA.TRAIN_JITTER_SCALES"]]
    data_out: Dict[str, Any] = {
        "NUM_CLASSES": int(v["MODEL.NUM_CLASSES"]), "CLIP_LEN": int(v["DATA.NUM_FRAMES"]),
        "FRAME_RATE": int(v["DATA.SAMPLING_RATE"]), "CROP_SIZE": int(v["DATA.TRAIN_CROP_SIZE"]),
        "TRAIN_SHORT_SIDE_RANGE": scales, "SHORT_SIDE_SIZE": int(v["DATA.TEST_CROP_SIZE"]),
        "MEAN": [float(x) for x in v["DATA.MEAN"]], "STD": [float(x) for x in v["DATA.STD"]],
        "TEST_NUM_SEGMENT": int(v["TEST.NUM_ENSEMBLE_VIEWS"]),
        "TEST_NUM_CROP": int(v["TEST.NUM_SPATIAL_CROPS"]),
        "NUM_WORKERS": int(v["DATA_LOADER.NUM_WORKERS"]),
    }
    if int(v["DATA.TEST_CROP_SIZE"]) != int(v["DATA.TRAIN_CROP_SIZE"]):
        notes.append(f"DATA.TEST_CROP_SIZE {v['DATA.TEST_CROP_SIZE']}: zoo tests on CROP_SIZE "
                     f"{data_out['CROP_SIZE']} crops taken at short side "
                     f"{data_out['SHORT_SIDE_SIZE']}")
    root = v.get("DATA.PATH_TO_DATA_DIR")
    if root:
        for split, key in (("train", "TRAIN"), ("val", "VAL"), ("test", "TEST")):
            data_out[f"{key}_ANNO_PATH"] = f"{str(root).rstrip('/')}/{split}.csv"
            data_out[f"{key}_DATA_PATH"] = str(v.get("DATA.PATH_PREFIX", ""))
    else:
        notes.append("no DATA.PATH_TO_DATA_DIR: set CONFIG.DATA.TRAIN_ANNO_PATH / VAL_ANNO_PATH")
    return data_out


def convert_pyslowfast(data: Dict[str, Any], source: str = "config"
                       ) -> Tuple[Dict[str, Any], List[str], List[str]]:
    """Convert a PySlowFast YAML mapping.

    Returns:
        ``(zoo config as a nested dict, PySlowFast keys with no counterpart, notes)``.

    Raises:
        ConfigError: the file is not a PySlowFast config or uses something zoo cannot express.
    """
    if not is_pyslowfast_yaml(data):
        raise ConfigError(f"{source} is not a PySlowFast config (no top-level TRAIN / SOLVER / "
                          "MODEL sections)")
    given = flatten_cfg(data)
    v = dict(_DEFAULTS, **given)
    notes: List[str] = []
    name, kwargs = _model(v, source)
    views = int(v["TEST.NUM_ENSEMBLE_VIEWS"]) * int(v["TEST.NUM_SPATIAL_CROPS"])
    train_batch, test_batch, procs = _batches(v, views, notes)
    train = _solver(v, source, notes)
    train.update(BATCH_SIZE=train_batch, REFERENCE_BATCH=train_batch * procs,
                 AUTO_RESUME=bool(v["TRAIN.AUTO_RESUME"]),
                 PRECISE_BN_ITERS=int(v["BN.NUM_BATCHES_PRECISE"]) if v["BN.USE_PRECISE_STATS"]
                 else 0)
    data_out = _data(v, notes)
    if float(v["BN.WEIGHT_DECAY"]) != 0.0:
        notes.append(f"BN.WEIGHT_DECAY {v['BN.WEIGHT_DECAY']}: zoo never decays norm parameters")
    if float(v["BN.MOMENTUM"]) != 0.1:
        notes.append(f"BN.MOMENTUM {v['BN.MOMENTUM']}: zoo's BatchNorm uses torch's 0.1")
    config = {
        "SEED": int(v["RNG_SEED"]),
        "TRAIN": train,
        "VAL": {"FREQ": int(v["TRAIN.EVAL_PERIOD"]), "BATCH_SIZE": train_batch},
        "TEST": {"BATCH_SIZE": test_batch},
        "DATA": data_out,
        "MODEL": {"NAME": name, "KWARGS": kwargs},
        "LOG": {"BASE_PATH": str(v["OUTPUT_DIR"]), "SAVE_FREQ": int(v["TRAIN.CHECKPOINT_PERIOD"])},
    }
    unmatched = sorted(k for k in given if k not in _CONSUMED)
    return {"CONFIG": config}, unmatched, notes


def write_converted(src: str, dst: str) -> Tuple[str, List[str], List[str]]:
    """Convert the PySlowFast YAML ``src`` and write the zoo config to ``dst``.

    Returns:
        ``(model name, PySlowFast keys with no counterpart, notes)``.
    """
    import os

    import yaml

    from .yaml_files import read_yaml_with_base

    if not os.path.isfile(src):
        raise ConfigError(f"{src!r} does not exist")
    data = read_yaml_with_base(src)  # PySlowFast's fvcore configs may name a _BASE_ too
    out, unmatched, notes = convert_pyslowfast(data, src)
    header = (f"# Converted from the PySlowFast config {os.path.basename(src)} by "
              "tools/convert_config.py.\n# Batch sizes are per process (PySlowFast's are global); "
              "see docs/migrating.md.\n")
    with open(dst, "w", encoding="utf-8") as f:
        f.write(header + yaml.safe_dump(out, sort_keys=False, default_flow_style=None))
    return out["CONFIG"]["MODEL"]["NAME"], unmatched, notes
