"""PySlowFast's training recipe keys -> CONFIG.TRAIN / CONFIG.DATA, and notes for the rest.

``solver`` converts the optimizer and the LR schedule (``steps_with_relative_lrs`` becomes zoo's
Step policy with ``CONFIG.TRAIN.LR_FACTORS``); ``recipe`` maps mixup / cutmix / label smoothing,
gradient clipping, repeated augmentation, RandAugment, random erasing, flips and precision to zoo
keys where zoo has them and writes a note naming every key zoo does not follow yet, saying
what zoo does instead; multigrid's cycles become ``CONFIG.TRAIN.MULTIGRID*``,
``SOLVER.LAYER_DECAY`` (1.0 = off) ``CONFIG.TRAIN.LAYER_DECAY`` (0 = off; the same rule for
MViT) and ``MODEL.ACT_CHECKPOINT`` ``CONFIG.TRAIN.ACT_CHECKPOINT``.
"""

from __future__ import annotations

from typing import Any, Dict, List

from .validation import ConfigError

# PySlowFast defaults (slowfast/config/defaults.py) of the keys read here.
RECIPE_DEFAULTS: Dict[str, Any] = {
    "SOLVER.CLIP_GRAD_L2NORM": None, "SOLVER.CLIP_GRAD_VAL": None,
    "SOLVER.BASE_LR_SCALE_NUM_SHARDS": False, "SOLVER.ZERO_WD_1D_PARAM": False,
    "SOLVER.LAYER_DECAY": 1.0, "MIXUP.ENABLE": False, "MIXUP.ALPHA": 0.8,
    "MIXUP.CUTMIX_ALPHA": 1.0, "MIXUP.PROB": 1.0, "MIXUP.SWITCH_PROB": 0.5,
    "MIXUP.LABEL_SMOOTH_VALUE": 0.1, "AUG.NUM_SAMPLE": 1, "AUG.ENABLE": False,
    "DATA.RANDOM_FLIP": True, "TRAIN.MIXED_PRECISION": False, "DETECTION.ENABLE": False,
    "MULTIGRID.LONG_CYCLE": False, "MULTIGRID.SHORT_CYCLE": False,
    "MULTIGRID.LONG_CYCLE_FACTORS": [[0.25, 0.5 ** 0.5], [0.5, 0.5 ** 0.5], [0.5, 1], [1, 1]],
    "MULTIGRID.SHORT_CYCLE_FACTORS": [0.5, 0.5 ** 0.5], "MULTIGRID.EPOCH_FACTOR": 1.5,
    "MULTIGRID.DEFAULT_S": 0,
    "AUG.AA_TYPE": "rand-m9-mstd0.5-inc1", "AUG.INTERPOLATION": "bicubic", "AUG.RE_PROB": 0.25,
    "AUG.RE_MODE": "pixel", "AUG.RE_COUNT": 1, "AUG.RE_SPLIT": False,
    "AUG.DIFFERENT_AUG_PER_FRAME": False,
    # Read by PySlowFast's image datasets only (its video path under AUG.ENABLE uses RandAugment).
    "AUG.COLOR_JITTER": 0.4,
    "MODEL.ACT_CHECKPOINT": False,
}

_RESIZED_CROP = ("DATA.TRAIN_JITTER_SCALES_RELATIVE / TRAIN_JITTER_ASPECT_RELATIVE (random resized "
                 "crop): zoo crops CROP_SIZE from a short side drawn from TRAIN_SHORT_SIDE_RANGE")

# Keys that only change how PySlowFast runs, with what zoo does instead (one note per group).
_NOTED = {
    "MULTIGRID.BN_BASE_SIZE": "MULTIGRID.BN_BASE_SIZE: zoo's multigrid keeps plain BatchNorm "
                              "over each process's batch (no sub-batch / synced BN switching)",
    "MULTIGRID.EVAL_FREQ": "MULTIGRID.EVAL_FREQ: zoo validates every CONFIG.VAL.FREQ epochs",
    "MULTIGRID.LONG_CYCLE_SAMPLING_RATE": "MULTIGRID.LONG_CYCLE_SAMPLING_RATE / DEFAULT_B / "
                                          "DEFAULT_T: PySlowFast sets them itself; so does zoo",
    "MULTIGRID.DEFAULT_B": "MULTIGRID.LONG_CYCLE_SAMPLING_RATE / DEFAULT_B / DEFAULT_T: "
                           "PySlowFast sets them itself; so does zoo",
    "MULTIGRID.DEFAULT_T": "MULTIGRID.LONG_CYCLE_SAMPLING_RATE / DEFAULT_B / DEFAULT_T: "
                           "PySlowFast sets them itself; so does zoo",
    "AUG.GEN_MASK_LOADER": "AUG.GEN_MASK_LOADER / MASK_* (masks for masked pretraining): zoo "
                           "trains classifiers on whole clips",
    "AUG.MASK_": "AUG.GEN_MASK_LOADER / MASK_* (masks for masked pretraining): zoo trains "
                 "classifiers on whole clips",
    "AUG.MAX_MASK_PATCHES_PER_BLOCK": "AUG.GEN_MASK_LOADER / MASK_* (masks for masked "
                                      "pretraining): zoo trains classifiers on whole clips",
    "SOLVER.CLIP_GRAD_VAL": "SOLVER.CLIP_GRAD_VAL: zoo clips the global norm only "
                            "(CONFIG.TRAIN.CLIP_GRAD_NORM)",
    "DATA.USE_OFFSET_SAMPLING": "DATA.USE_OFFSET_SAMPLING: zoo's test views start evenly "
                                "spaced from the video's first frame to the last start that "
                                "fits, rounded to frames (the offsets are not floored)",
    "DATA.INV_UNIFORM_SAMPLE": "DATA.INV_UNIFORM_SAMPLE: zoo's scale jitter draws the short "
                               "side uniformly",
    "DATA.TRAIN_JITTER_SCALES_RELATIVE": _RESIZED_CROP,
    "DATA.TRAIN_JITTER_ASPECT_RELATIVE": _RESIZED_CROP,
    "DATA.DECODING_BACKEND": "DATA.DECODING_BACKEND: zoo picks its reader per file "
                             "(CONFIG.DATA.DECODER auto)",
    "TENSORBOARD.": "TENSORBOARD.*: zoo writes its own logs under CONFIG.LOG.BASE_PATH",
    "DEMO.": "DEMO.*: zoo's demo is tools/predict.py",
    "TRAIN.CHECKPOINT_": "TRAIN.CHECKPOINT_*: give the weights with CONFIG.MODEL.PRETRAINED or "
                         "tools/convert_checkpoint.py (PySlowFast .pyth files convert)",
    "TEST.CHECKPOINT_": "TEST.CHECKPOINT_*: give the weights with CONFIG.TEST.CHECKPOINT",
}

RECIPE_KEYS = set(RECIPE_DEFAULTS) | {
    "SOLVER.BASE_LR", "SOLVER.LR_POLICY", "SOLVER.COSINE_END_LR", "SOLVER.COSINE_AFTER_WARMUP",
    "SOLVER.STEPS", "SOLVER.LRS", "SOLVER.MAX_EPOCH", "SOLVER.MOMENTUM", "SOLVER.NESTEROV",
    "SOLVER.WEIGHT_DECAY", "SOLVER.WARMUP_EPOCHS", "SOLVER.WARMUP_START_LR",
    "SOLVER.OPTIMIZING_METHOD", "SOLVER.DAMPENING", "MODEL.LOSS_FUNC",
}


def noted(key: str) -> bool:
    """True for a key one of the recipe notes speaks for."""
    return any(key.startswith(prefix) for prefix in _NOTED)


def notes_for(given: Dict[str, Any]) -> List[str]:
    """One note per group of keys the file sets that zoo does not follow."""
    texts = [text for prefix, text in _NOTED.items() if any(k.startswith(prefix) for k in given)]
    return list(dict.fromkeys(texts))  # keys that share a note give it once


def _steps(v: Dict[str, Any], source: str, base_lr: float) -> Dict[str, Any]:
    """``steps_with_relative_lrs``: LR = BASE_LR x LRS[i] from STEPS[i] on (PySlowFast's
    get_step_index runs over STEPS + [MAX_EPOCH]), as a Step policy with LR_FACTORS."""
    steps, lrs = [float(s) for s in v["SOLVER.STEPS"]], [float(x) for x in v["SOLVER.LRS"]]
    # A step at or past MAX_EPOCH is never reached, so it needs no LRS entry.
    steps = [s for s in steps if s < int(v["SOLVER.MAX_EPOCH"])]
    if not steps or steps[0] != 0 or len(lrs) < len(steps) or steps != sorted(steps):
        raise ConfigError(f"{source}: SOLVER.STEPS {v['SOLVER.STEPS']} / SOLVER.LRS "
                          f"{v['SOLVER.LRS']} is not a steps_with_relative_lrs schedule (STEPS "
                          "starts at 0, ascends, and LRS has an entry for each)")
    return {"LR_POLICY": "Step", "LR": base_lr, "STEP": 0.1,
            "LR_MILESTONE": [int(s) for s in steps[1:]], "LR_FACTORS": lrs[:len(steps)]}


def solver(v: Dict[str, Any], source: str, notes: List[str]) -> Dict[str, Any]:
    """CONFIG.TRAIN's optimizer and schedule keys."""
    policy = str(v["SOLVER.LR_POLICY"])
    base_lr, warmup = float(v["SOLVER.BASE_LR"]), float(v["SOLVER.WARMUP_EPOCHS"])
    warmup_start, cosine_end = float(v["SOLVER.WARMUP_START_LR"]), float(v["SOLVER.COSINE_END_LR"])
    if v["SOLVER.BASE_LR_SCALE_NUM_SHARDS"]:  # PySlowFast's assert_and_infer_cfg scales all three
        shards = int(v["NUM_SHARDS"])
        base_lr, warmup_start, cosine_end = (
            x * shards for x in (base_lr, warmup_start, cosine_end))
    train: Dict[str, Any] = {
        "EPOCH_NUM": int(v["SOLVER.MAX_EPOCH"]), "LR": base_lr,
        "MOMENTUM": float(v["SOLVER.MOMENTUM"]), "W_DECAY": float(v["SOLVER.WEIGHT_DECAY"]),
        "USE_WARMUP": warmup > 0, "WARMUP_EPOCHS": warmup, "WARMUP_START_LR": warmup_start,
    }  # WARMUP_END_LR stays 0: the warmup ends on the schedule's LR, as PySlowFast's does
    method = str(v["SOLVER.OPTIMIZING_METHOD"]).lower()
    if method not in ("sgd", "adamw"):
        raise ConfigError(f"{source}: SOLVER.OPTIMIZING_METHOD = {method!r} has no zoo "
                          "counterpart (zoo has sgd and adamw)")
    train["OPTIMIZER"] = "SGD" if method == "sgd" else "AdamW"
    if policy == "cosine":
        train["LR_POLICY"] = "Cosine"
        if cosine_end != 0.0:
            notes.append(f"SOLVER.COSINE_END_LR {v['SOLVER.COSINE_END_LR']}: zoo's cosine ends "
                         "at 0")
        # False (PySlowFast's default): the cosine spans all MAX_EPOCH epochs from 0 and the
        # warmup climbs to its value where the warmup ends; True: it starts at LR after it.
        train["COSINE_AFTER_WARMUP"] = bool(v["SOLVER.COSINE_AFTER_WARMUP"])
    elif policy == "steps_with_relative_lrs":
        train.update(_steps(v, source, base_lr))
    else:
        raise ConfigError(f"{source}: SOLVER.LR_POLICY = {policy!r} has no zoo counterpart "
                          "(zoo converts cosine and steps_with_relative_lrs)")
    if method == "sgd":
        train["NESTEROV"] = bool(v["SOLVER.NESTEROV"]) and float(v["SOLVER.MOMENTUM"]) > 0
    if float(v["SOLVER.DAMPENING"]) != 0.0 and method == "sgd":
        notes.append(f"SOLVER.DAMPENING {v['SOLVER.DAMPENING']}: zoo's SGD does not dampen its "
                     "momentum (torch's dampening 0)")
    if method == "adamw":
        notes.append("SOLVER.MOMENTUM: AdamW uses torch's betas (0.9, 0.999)")
    if float(v["SOLVER.LAYER_DECAY"]) != 1.0:  # PySlowFast's 1.0 scales every layer by 1
        train["LAYER_DECAY"] = float(v["SOLVER.LAYER_DECAY"])
    clip = v["SOLVER.CLIP_GRAD_L2NORM"]
    if clip is not None:
        train["CLIP_GRAD_NORM"] = float(clip)
    if not v["SOLVER.ZERO_WD_1D_PARAM"]:
        notes.append("SOLVER.ZERO_WD_1D_PARAM False: zoo does not decay biases either (no "
                     "parameter of at most one dimension is decayed), as PySlowFast with it True")
    return train


def augment(v: Dict[str, Any], notes: List[str]) -> Dict[str, Any]:
    """AUG.ENABLE's RandAugment and random erasing as CONFIG.DATA keys."""
    data: Dict[str, Any] = {}
    policy = str(v["AUG.AA_TYPE"] or "")
    if policy.startswith("rand"):
        data["RAND_AUGMENT"] = policy
    elif policy:
        notes.append(f"AUG.AA_TYPE {policy}: zoo has timm's RandAugment policies (rand-...) only; "
                     "its train clips get no automatic augmentation")
    if policy and str(v["AUG.INTERPOLATION"]).lower() != "bicubic":
        notes.append(f"AUG.INTERPOLATION {v['AUG.INTERPOLATION']}: zoo's RandAugment rotates and "
                     "shears with bicubic interpolation")
    if v["AUG.DIFFERENT_AUG_PER_FRAME"]:
        notes.append("AUG.DIFFERENT_AUG_PER_FRAME True: zoo draws RandAugment once per clip")
    prob = float(v["AUG.RE_PROB"])
    if prob > 0:
        data["RANDOM_ERASE"] = prob
        mode = str(v["AUG.RE_MODE"]).lower()
        if mode != "pixel":
            notes.append(f"AUG.RE_MODE {mode}: zoo fills the erased box with per-pixel noise "
                         "(pixel)")
        if int(v["AUG.RE_COUNT"]) != 1:
            notes.append(f"AUG.RE_COUNT {v['AUG.RE_COUNT']}: zoo erases one box per clip")
        if v["AUG.RE_SPLIT"]:
            notes.append("AUG.RE_SPLIT True: zoo keeps no unerased split; every clip may be "
                         "erased")
    return data


def recipe(v: Dict[str, Any], given: Dict[str, Any], source: str, notes: List[str]
           ) -> Dict[str, Dict[str, Any]]:
    """Mixup, loss, repeated augmentation, RandAugment, random erasing, flip and precision keys,
    by CONFIG section."""
    train: Dict[str, Any] = {}
    data: Dict[str, Any] = {}
    loss = str(v["MODEL.LOSS_FUNC"])
    if loss not in ("cross_entropy", "soft_cross_entropy"):
        raise ConfigError(f"{source}: MODEL.LOSS_FUNC = {loss!r} has no zoo counterpart (zoo "
                          "trains with cross_entropy, soft targets under mixup)")
    if v["MIXUP.ENABLE"]:
        prob = float(v["MIXUP.PROB"])
        train.update(MIXUP_ALPHA=float(v["MIXUP.ALPHA"]) if prob > 0 else 0.0,
                     CUTMIX_ALPHA=float(v["MIXUP.CUTMIX_ALPHA"]) if prob > 0 else 0.0,
                     LABEL_SMOOTHING=float(v["MIXUP.LABEL_SMOOTH_VALUE"]))
        if 0 < prob < 1:
            notes.append(f"MIXUP.PROB {prob}: zoo mixes every batch")
        if float(v["MIXUP.SWITCH_PROB"]) != 0.5:
            notes.append(f"MIXUP.SWITCH_PROB {v['MIXUP.SWITCH_PROB']}: with both on, zoo picks "
                         "mixup or cutmix with even odds")
    elif loss == "soft_cross_entropy":
        notes.append("MODEL.LOSS_FUNC soft_cross_entropy without MIXUP.ENABLE: on hard labels it "
                     "is zoo's cross-entropy")
    if v["DETECTION.ENABLE"]:
        raise ConfigError(f"{source}: DETECTION.ENABLE = True (AVA detection) has no zoo "
                          "counterpart; zoo converts classification configs")
    num_sample = int(v["AUG.NUM_SAMPLE"])
    if num_sample > 1:
        data.update(CLIPS_PER_VIDEO=num_sample, CLIPS_WINDOW="shared")
    if v["AUG.ENABLE"]:
        data.update(augment(v, notes))
    data["RANDOM_FLIP"] = bool(v["DATA.RANDOM_FLIP"])
    if v["MODEL.ACT_CHECKPOINT"]:
        train["ACT_CHECKPOINT"] = True
    if "TRAIN.MIXED_PRECISION" in given:
        train["PRECISION"] = "auto" if v["TRAIN.MIXED_PRECISION"] else "fp32"
        if v["TRAIN.MIXED_PRECISION"]:
            notes.append("TRAIN.MIXED_PRECISION True: zoo's PRECISION auto trains in bf16 "
                         "where the device computes it natively (fp16 is PRECISION fp16)")
    train.update(multigrid(v))
    notes.extend(notes_for(given))
    return {"TRAIN": train, "DATA": data}


def multigrid(v: Dict[str, Any]) -> Dict[str, Any]:
    """``MULTIGRID.LONG_CYCLE`` / ``SHORT_CYCLE`` and their knobs -> ``CONFIG.TRAIN.MULTIGRID*``
    (nothing when both cycles are off)."""
    mode = "+".join(name for name, key in (("long", "MULTIGRID.LONG_CYCLE"),
                                           ("short", "MULTIGRID.SHORT_CYCLE")) if v[key])
    if not mode:
        return {}
    return {"MULTIGRID": mode,
            "MULTIGRID_LONG_CYCLE_FACTORS": [[float(a), float(b)]
                                             for a, b in v["MULTIGRID.LONG_CYCLE_FACTORS"]],
            "MULTIGRID_SHORT_CYCLE_FACTORS": [float(f) for f in
                                              v["MULTIGRID.SHORT_CYCLE_FACTORS"]],
            "MULTIGRID_EPOCH_FACTOR": float(v["MULTIGRID.EPOCH_FACTOR"]),
            "MULTIGRID_DEFAULT_S": int(v["MULTIGRID.DEFAULT_S"])}
