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

from .pyslowfast_models import MODEL_KEYS, model
from .pyslowfast_recipe import RECIPE_DEFAULTS, RECIPE_KEYS, noted, recipe, solver
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
    "TRAIN.AUTO_RESUME": False, "TRAIN.ENABLE": True, "TEST.BATCH_SIZE": 8,
    "TEST.NUM_ENSEMBLE_VIEWS": 10,
    "TEST.NUM_SPATIAL_CROPS": 3, "DATA.NUM_FRAMES": 8, "DATA.SAMPLING_RATE": 8,
    "DATA.TARGET_FPS": 30,
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
    "RNG_SEED": 1, "OUTPUT_DIR": "./tmp", "TRAIN.DATASET": "kinetics",
}

# Defaults of the model and recipe keys read by the sibling modules.
_DEFAULTS.update(RECIPE_DEFAULTS)
_DEFAULTS.update({
    "DATA.INPUT_CHANNEL_NUM": [3, 3], "RESNET.SPATIAL_STRIDES": [[1, 1], [2, 2], [2, 2], [2, 2]],
    "RESNET.SPATIAL_DILATIONS": [[1, 1], [1, 1], [1, 1], [1, 1]],
    "RESNET.NUM_BLOCK_TEMP_KERNEL": [[3, 3], [4, 4], [6, 6], [3, 3]],
    "NONLOCAL.LOCATION": [[[], []]] * 4, "NONLOCAL.GROUP": [[1, 1]] * 4,
    "NONLOCAL.INSTANTIATION": "dot_product", "NONLOCAL.POOL": [[[1, 2, 2], [1, 2, 2]]] * 4,
    "X3D.WIDTH_FACTOR": 1.0, "X3D.DEPTH_FACTOR": 1.0, "X3D.BOTTLENECK_FACTOR": 1.0,
    "X3D.DIM_C5": 2048, "X3D.DIM_C1": 12, "X3D.SCALE_RES2": False, "X3D.BN_LIN5": False,
    "X3D.CHANNELWISE_3x3x3": True,
})

# PySlowFast's loaders (TRAIN.DATASET) whose clips zoo's dense sampling reproduces, and those
# that take DATA.NUM_FRAMES frames one per equal segment of the whole video (SAMPLING_RATE
# unused; random in training, the middle in testing: Something-Something v2, read from frame
# lists, in slowfast/datasets/ssv2.py and its PyTorchVideo twin).
_DENSE_DATASETS = ("kinetics", "ptvkinetics")
_UNIFORM_DATASETS = ("ssv2", "ptvssv2")

# Keys whose meaning the conversion carries (to a zoo key, the model name, a check or a note).
_CONSUMED = set(_DEFAULTS) | MODEL_KEYS | RECIPE_KEYS | {
    "TRAIN.ENABLE", "TEST.ENABLE", "TRAIN.DATASET", "TEST.DATASET", "DATA.PATH_TO_DATA_DIR",
    "DATA.PATH_PREFIX",
}


def is_pyslowfast_yaml(data: Any) -> bool:
    """True for a YAML mapping laid out like PySlowFast's (top-level TRAIN / SOLVER / MODEL ...)."""
    if not isinstance(data, dict) or "CONFIG" in data or "DDP_CONFIG" in data:
        return False
    return any(k in data for k in _SECTIONS) or any(
        isinstance(data.get(section), dict) and key in data[section] for section, key in _INNER)


def _batches(v: Dict[str, Any], views: int) -> Tuple[int, int, int]:
    """``(train, test, processes)``: PySlowFast's batch sizes are per machine (its loader divides
    them by NUM_GPUS only), and NUM_SHARDS machines train together."""
    gpus = max(1, int(v["NUM_GPUS"]))
    train = max(1, int(v["TRAIN.BATCH_SIZE"]) // gpus)
    # PySlowFast counts test clips; zoo's TEST.BATCH_SIZE counts videos of `views` clips each.
    test = max(1, int(v["TEST.BATCH_SIZE"]) // gpus // views)
    return train, test, gpus * max(1, int(v["NUM_SHARDS"]))


def _batch_note(v: Dict[str, Any], procs: int, train: int, clips: int) -> str:
    per_video = f", {clips} clips per video" if clips > 1 else ""
    machines = int(v["NUM_SHARDS"])
    over = (f" on each of NUM_SHARDS = {machines} machines ({procs} processes)" if machines > 1
            else "")
    return (f"TRAIN.BATCH_SIZE {v['TRAIN.BATCH_SIZE']} is per machine, over NUM_GPUS = "
            f"{v['NUM_GPUS']} processes{over}{per_video}: zoo's per-process "
            f"CONFIG.TRAIN.BATCH_SIZE is {train} clips, and CONFIG.TRAIN.REFERENCE_BATCH "
            f"{train * procs} scales the LR linearly on other process counts")


def _data(v: Dict[str, Any], notes: List[str]) -> Dict[str, Any]:
    """CONFIG.DATA: clip, crops, scale jitter, normalisation, test views, lists."""
    scales = [int(s) for s in v["DATA.TRAIN_JITTER_SCALES"]]
    data_out: Dict[str, Any] = {
        "NUM_CLASSES": int(v["MODEL.NUM_CLASSES"]), "CLIP_LEN": int(v["DATA.NUM_FRAMES"]),
        "FRAME_RATE": int(v["DATA.SAMPLING_RATE"]), "TARGET_FPS": float(v["DATA.TARGET_FPS"]),
        "CROP_SIZE": int(v["DATA.TRAIN_CROP_SIZE"]),
        "TRAIN_SHORT_SIDE_RANGE": scales, "SHORT_SIDE_SIZE": scales[0],
        "MEAN": [float(x) for x in v["DATA.MEAN"]], "STD": [float(x) for x in v["DATA.STD"]],
        "TEST_NUM_SEGMENT": int(v["TEST.NUM_ENSEMBLE_VIEWS"]),
        "TEST_NUM_CROP": int(v["TEST.NUM_SPATIAL_CROPS"]),
        "NUM_WORKERS": int(v["DATA_LOADER.NUM_WORKERS"]),
    }
    dataset = str(v["TRAIN.DATASET"]).lower()
    root = v.get("DATA.PATH_TO_DATA_DIR")
    # PySlowFast's Kinetics test split resizes the short side to TEST_CROP_SIZE for 3 crops and
    # to TRAIN_JITTER_SCALES[0] for 1 (slowfast/datasets/kinetics.py; ssv2.py to TEST_CROP_SIZE
    # for both). Its val split samples as training does (a random short side from the jitter
    # range, a random crop and flip): zoo's centre crop at the range's lower end stands in.
    test_side = (int(v["DATA.TEST_CROP_SIZE"])
                 if data_out["TEST_NUM_CROP"] > 1 or dataset in _UNIFORM_DATASETS else scales[0])
    if test_side != data_out["SHORT_SIDE_SIZE"]:
        data_out["TEST_SHORT_SIDE_SIZE"] = test_side
    notes.append(f"DATA.TRAIN_JITTER_SCALES {scales}: PySlowFast's val split takes random crops "
                 f"as training does; zoo validates on the centre crop at short side {scales[0]}")
    if int(v["DATA.TEST_CROP_SIZE"]) != int(v["DATA.TRAIN_CROP_SIZE"]):
        notes.append(f"DATA.TEST_CROP_SIZE {v['DATA.TEST_CROP_SIZE']}: zoo tests on CROP_SIZE "
                     f"{data_out['CROP_SIZE']} crops taken at short side {test_side}")
    if dataset in _UNIFORM_DATASETS:
        del data_out["FRAME_RATE"], data_out["TARGET_FPS"]
        data_out["SAMPLING"] = "uniform"
        notes.append(f"TRAIN.DATASET {dataset}: PySlowFast takes DATA.NUM_FRAMES "
                     f"{data_out['CLIP_LEN']} frames, one from each equal segment of the whole "
                     "video (at random in training, the middle in testing; DATA.SAMPLING_RATE "
                     f"{v['DATA.SAMPLING_RATE']} unused): CONFIG.DATA.SAMPLING uniform")
        notes.append(f"TRAIN.DATASET {dataset}: PySlowFast reads it from frame lists and label "
                     "JSON files, which zoo does not: set CONFIG.DATA.TRAIN_ANNO_PATH / "
                     "VAL_ANNO_PATH to 'video label' lists of the videos (docs/datasets.md)")
        return data_out
    if dataset not in _DENSE_DATASETS:
        notes.append(f"TRAIN.DATASET {dataset}: not one of PySlowFast's own loaders zoo knows "
                     f"({', '.join(_DENSE_DATASETS + _UNIFORM_DATASETS)}); zoo samples its clips "
                     "as PySlowFast's Kinetics loader does (dense windows): check that this is "
                     "what it did")
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
    name, kwargs, model_notes, model_keys = model(v, source)
    notes += model_notes
    views = int(v["TEST.NUM_ENSEMBLE_VIEWS"]) * int(v["TEST.NUM_SPATIAL_CROPS"])
    train_batch, test_batch, procs = _batches(v, views)
    extra = recipe(v, given, source, notes)
    # PySlowFast's batch counts videos; with AUG.NUM_SAMPLE clips each, zoo's counts the clips.
    clips = int(extra["DATA"].get("CLIPS_PER_VIDEO", 1))
    train_batch *= clips
    notes.append(_batch_note(v, procs, train_batch, clips))
    train = solver(v, source, notes)
    train.update(extra["TRAIN"])
    if not v["TRAIN.ENABLE"]:
        notes.append("TRAIN.ENABLE False: a test-only PySlowFast config; run tools/test_ddp.py "
                     "with CONFIG.TEST.CHECKPOINT")
    train.update(BATCH_SIZE=train_batch, REFERENCE_BATCH=train_batch * procs,
                 AUTO_RESUME=bool(v["TRAIN.AUTO_RESUME"]),
                 PRECISE_BN_ITERS=int(v["BN.NUM_BATCHES_PRECISE"]) if v["BN.USE_PRECISE_STATS"]
                 else 0)
    data_out = _data(v, notes)
    data_out.update(extra["DATA"])
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
    unmatched = sorted(k for k in given
                       if k not in _CONSUMED and k not in model_keys and not noted(k))
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
    # PySlowFast's fvcore configs may name a _BASE_ too; a key set twice is read as its loader
    # reads it (the last wins).
    data = read_yaml_with_base(src, unique_keys=False)
    out, unmatched, notes = convert_pyslowfast(data, src)
    header = (f"# Converted from the PySlowFast config {os.path.basename(src)} by "
              "tools/convert_config.py.\n# Batch sizes are per process (PySlowFast's are global); "
              "see docs/migrating.md.\n")
    with open(dst, "w", encoding="utf-8") as f:
        f.write(header + yaml.safe_dump(out, sort_keys=False, default_flow_style=None))
    return out["CONFIG"]["MODEL"]["NAME"], unmatched, notes
