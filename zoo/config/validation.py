"""Value checks run on every loaded config. Each failure is one line naming the key and the fix."""

from __future__ import annotations

import math
import multiprocessing
import re
from typing import Any, Callable, List, Tuple

from yacs.config import CfgNode

from ..utils.errors import UserError
from ..utils.lr_curves import cosine_lr, step_lr
from .tree import lookup_key

# The start methods this platform has, for loader workers (CONFIG.DATA.WORKER_START_METHOD).
START_METHODS = tuple(multiprocessing.get_all_start_methods())


class ConfigError(UserError, ValueError):
    """A config key is unknown, has the wrong type or an impossible value (exit code 2, like a
    usage error)."""

    exit_code = 2


def _positive(v: Any) -> bool:
    return v > 0


def _non_negative(v: Any) -> bool:
    return v >= 0


def _numbers(v: Any) -> bool:
    """Every entry of the list is a number (YAML reads ``[30 60]`` as one string)."""
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)


def _frame_template_ok(template: str) -> bool:
    """A str.format pattern with one integer field that names files (not folders) and gives
    different names for different frame numbers (CONFIG.DATA.FRAME_TEMPLATE)."""
    try:
        first, second = template.format(1), template.format(2)
    except (IndexError, KeyError, ValueError):
        return False
    return first != second and "/" not in first and "\\" not in first


# timm's RandAugment policy: "rand" and dash-separated sections (timm reads the rest; a value it
# rejects stops the dataset's construction with the key named).
_RAND_AUGMENT = re.compile(r"rand(-(m|n|mmax|inc)\d+|-(p|mstd)[\d.]+|-t\w+)*")


# (key, predicate, what is allowed)
_RULES: List[Tuple[str, Callable[[Any], bool], str]] = [
    (
        "DDP_CONFIG.WORLD_SIZE",
        _non_negative,
        "an integer >= 1 (number of nodes), or 0 for one node per WORLD_URLS entry",
    ),
    ("DDP_CONFIG.DIST_BACKEND", lambda v: v in ("nccl", "gloo", "auto"), "one of nccl, gloo, auto"),
    (
        "DDP_CONFIG.DIST_URL",
        lambda v: v.startswith(("tcp://", "file://", "env://")),
        "tcp://host:port, file:///path or env://",
    ),
    ("DDP_CONFIG.NUM_CPU_PROCS", _positive, "an integer >= 1"),
    ("DDP_CONFIG.THREADS_PER_PROC", _non_negative, "an integer >= 0 (0 = automatic)"),
    ("DDP_CONFIG.INIT_TIMEOUT", _positive, "a number of seconds > 0"),
    ("DDP_CONFIG.HANG_TIMEOUT", _non_negative, "a number of seconds >= 0 (0 = off)"),
    ("DDP_CONFIG.JOB_TOKEN", lambda v: isinstance(v, str), "a string (\"\" = no token)"),
    ("DDP_CONFIG.GRAD_COMPRESSION", lambda v: v in ("none", "bf16", "fp16", "powersgd"),
     "one of none, bf16, fp16, powersgd"),
    ("DDP_CONFIG.POWERSGD_RANK", _positive, "an integer >= 1"),
    ("DDP_CONFIG.POWERSGD_START_STEP", lambda v: isinstance(v, int) and v >= 2,
     "an integer >= 2 (DDP regroups its buckets after the first step)"),
    ("DDP_CONFIG.BUCKET_CAP_MB", lambda v: v > 0, "a number of MB > 0"),
    ("DDP_CONFIG.STRATEGY", lambda v: v in ("ddp", "fsdp"), "ddp or fsdp"),
    ("DDP_CONFIG.MAX_RESTARTS", _non_negative, "an integer >= 0 (0 = fail fast)"),
    ("CONFIG.TRAIN.EPOCH_NUM", _positive, "an integer >= 1"),
    ("CONFIG.TRAIN.BATCH_SIZE", _positive, "an integer >= 1"),
    ("CONFIG.TRAIN.LR", _non_negative, "a number >= 0"),
    ("CONFIG.TRAIN.OPTIMIZER", lambda v: v in ("SGD", "AdamW"), "one of SGD, AdamW"),
    ("CONFIG.TRAIN.MOMENTUM", lambda v: 0 <= v < 1, "a number in [0, 1)"),
    ("CONFIG.TRAIN.NESTEROV", lambda v: isinstance(v, bool), "True or False"),
    ("CONFIG.TRAIN.W_DECAY", _non_negative, "a number >= 0"),
    ("CONFIG.TRAIN.LR_POLICY", lambda v: v in ("Cosine", "Step"), "one of Cosine, Step"),
    ("CONFIG.TRAIN.COSINE_AFTER_WARMUP", lambda v: isinstance(v, bool),
     "True (the cosine starts where the warmup ends) or False (it starts at epoch 0)"),
    ("CONFIG.TRAIN.STEP", _positive, "a number > 0"),
    ("CONFIG.TRAIN.LR_FACTORS", lambda v: all(isinstance(x, (int, float)) and x >= 0 for x in v),
     "a list of numbers >= 0 (relative LRs), or [] = STEP at each milestone"),
    ("CONFIG.TRAIN.WARMUP_EPOCHS", _non_negative, "a number >= 0"),
    ("CONFIG.TRAIN.RESUME_EPOCH", lambda v: v >= -1, "-1 (start fresh) or an epoch >= 0"),
    ("CONFIG.TRAIN.KEEP_LAST", _non_negative, "an integer >= 0 (0 = keep all)"),
    ("CONFIG.TRAIN.BEST_METRIC", lambda v: v in ("top1", "top5", "mean_class_acc", "loss"),
     "one of top1, top5, mean_class_acc, loss"),
    ("CONFIG.TRAIN.EARLY_STOP_PATIENCE", _non_negative, "an integer >= 0 (0 = no early stop)"),
    ("CONFIG.TRAIN.REFERENCE_BATCH", _non_negative, "an integer >= 0 (0 = no LR scaling)"),
    ("CONFIG.TRAIN.BACKBONE_LR_MULT", _non_negative, "a number >= 0"),
    ("CONFIG.TRAIN.LAYER_DECAY", lambda v: 0 <= v <= 1, "a number in [0, 1] (0 = off)"),
    ("CONFIG.TRAIN.ACT_CHECKPOINT", lambda v: isinstance(v, bool), "True or False"),
    ("CONFIG.MODEL.DROP_PATH", lambda v: 0 <= v < 1,
     "a number in [0, 1) (0 = the model's default)"),
    (
        "CONFIG.TRAIN.PRECISION",
        lambda v: v in ("auto", "fp32", "bf16", "fp16"),
        "one of auto, fp32, bf16, fp16",
    ),
    (
        "CONFIG.TRAIN.MEMORY_FORMAT",
        lambda v: v in ("auto", "channels_last", "contiguous"),
        "one of auto, channels_last, contiguous",
    ),
    *[(f"CONFIG.TRAIN.{key}", lambda v: v in ("auto", "True", "False"), "auto, True or False")
      for key in ("COMPILE", "CUDNN_BENCHMARK", "STEM_PAD_CHANNELS")],
    (
        "CONFIG.TRAIN.COMPILE_MODE",
        lambda v: v in ("auto", "default", "reduce-overhead", "max-autotune",
                        "max-autotune-no-cudagraphs"),
        "one of auto, default, reduce-overhead, max-autotune, max-autotune-no-cudagraphs",
    ),
    (
        "CONFIG.TRAIN.LR_MILESTONE",
        lambda v: _numbers(v) and all(a < b for a, b in zip(v, v[1:])) and _non_negative(min(
            v, default=0)),
        "epochs >= 0 in increasing order, e.g. [30, 60]",
    ),
    ("CONFIG.TRAIN.LR_FACTORS", lambda v: _numbers(v) and all(f >= 0 for f in v),
     "numbers >= 0, e.g. [1.0, 0.1, 0.01]"),
    ("CONFIG.TRAIN.ACCUM_STEPS", _positive, "an integer >= 1"),
    ("CONFIG.TRAIN.CLIP_GRAD_NORM", _non_negative, "a number >= 0 (0 = off)"),
    ("CONFIG.TRAIN.FIND_UNUSED_PARAMETERS", lambda v: isinstance(v, bool), "True or False"),
    ("CONFIG.TRAIN.LABEL_SMOOTHING", lambda v: 0 <= v < 1, "a number in [0, 1)"),
    ("CONFIG.TRAIN.MIXUP_ALPHA", _non_negative, "a number >= 0 (0 = off)"),
    ("CONFIG.TRAIN.CUTMIX_ALPHA", _non_negative, "a number >= 0 (0 = off)"),
    ("CONFIG.TRAIN.EMA_DECAY", lambda v: 0 <= v < 1, "a number in [0, 1) (0 = off)"),
    ("CONFIG.TRAIN.PRECISE_BN_ITERS", _non_negative, "an integer >= 0 (0 = off)"),
    ("CONFIG.TRAIN.NONFINITE", lambda v: v in ("stop", "skip"), "one of stop, skip"),
    ("CONFIG.TRAIN.PREEMPT_GRACE", _positive, "a number of seconds > 0"),
    (
        "CONFIG.TRAIN.HOOKS",
        lambda v: all(str(e).rpartition(":")[0] and str(e).rpartition(":")[2].isidentifier()
                      for e in v),
        "a list of 'path/to/file.py:ClassName' or 'package.module:ClassName' entries",
    ),
    ("CONFIG.TRAIN.MULTIGRID", lambda v: v in ("", "long", "short", "long+short"),
     '"" (off), long, short or long+short'),
    (
        "CONFIG.TRAIN.MULTIGRID_LONG_CYCLE_FACTORS",
        lambda v: len(v) >= 1 and all(len(f) == 2 and f[0] > 0 and f[1] > 0 for f in v),
        "a list of [frames factor, crop factor] pairs, each factor > 0",
    ),
    (
        "CONFIG.TRAIN.MULTIGRID_SHORT_CYCLE_FACTORS",
        lambda v: len(v) == 2 and all(0 < f <= 1 for f in v),
        "two crop factors in (0, 1]",
    ),
    ("CONFIG.TRAIN.MULTIGRID_EPOCH_FACTOR", lambda v: v > 0, "a number > 0"),
    ("CONFIG.TRAIN.MULTIGRID_DEFAULT_S", _non_negative, "an integer >= 0 (0 = DATA.CROP_SIZE)"),
    ("CONFIG.VAL.FREQ", _non_negative, "an integer >= 0"),
    ("CONFIG.VAL.BATCH_SIZE", _positive, "an integer >= 1"),
    ("CONFIG.TEST.BATCH_SIZE", _positive, "an integer >= 1"),
    ("CONFIG.DATA.NUM_CLASSES", _non_negative, "an integer >= 1, or 0 to count the classes"),
    ("CONFIG.DATA.CLIP_LEN", _positive, "an integer >= 1"),
    ("CONFIG.DATA.FRAME_RATE", _positive, "an integer >= 1"),
    ("CONFIG.DATA.TARGET_FPS", _non_negative,
     "frames per second >= 0 (0 = strides in each video's own frames)"),
    ("CONFIG.DATA.TEST_NUM_SEGMENT", _positive, "an integer >= 1"),
    ("CONFIG.DATA.TEST_NUM_CROP", lambda v: v in (1, 3), "1 or 3"),
    ("CONFIG.DATA.CROP_SIZE", _positive, "an integer >= 1"),
    ("CONFIG.DATA.SHORT_SIDE_SIZE", _positive, "an integer >= 1"),
    ("CONFIG.DATA.TEST_SHORT_SIDE_SIZE", _non_negative,
     "an integer >= 1, or 0 = SHORT_SIDE_SIZE"),
    (
        "CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE",
        lambda v: len(v) == 2 and 0 < v[0] <= v[1],
        "[min, max] with 0 < min <= max",
    ),
    ("CONFIG.DATA.NEW_HEIGHT", _positive, "an integer >= 1"),
    ("CONFIG.DATA.NEW_WIDTH", _positive, "an integer >= 1"),
    ("CONFIG.DATA.MEAN", lambda v: len(v) in (0, 3) and _numbers(v),
     "3 numbers (R, G, B), or [] = the model's"),
    (
        "CONFIG.DATA.STD",
        lambda v: len(v) in (0, 3) and _numbers(v) and all(s > 0 for s in v),
        "3 numbers > 0, or [] = the model's",
    ),
    ("CONFIG.DATA.NUM_WORKERS", _non_negative, "an integer >= 0"),
    ("CONFIG.DATA.WORKER_START_METHOD", lambda v: v == "auto" or v in START_METHODS,
     "auto or a start method of this platform: " + ", ".join(START_METHODS)),
    ("CONFIG.DATA.BATCH_BUFFERS_PER_WORKER", _non_negative, "an integer >= 0"),
    (
        "CONFIG.DATA.SAMPLING",
        lambda v: v in ("dense", "tsn", "uniform"),
        "one of dense, tsn, uniform",
    ),
    ("CONFIG.DATA.NUM_SEGMENT", _positive, "an integer >= 1"),
    ("CONFIG.DATA.CLIPS_PER_VIDEO", _positive, "an integer >= 1"),
    ("CONFIG.DATA.NORMALIZE_ON", lambda v: v in ("device", "loader"), "device or loader"),
    ("CONFIG.DATA.RESIZE_ON", lambda v: v in ("loader", "device"), "loader or device"),
    ("CONFIG.DATA.CLIPS_WINDOW", lambda v: v in ("independent", "shared"),
     "independent or shared"),
    (
        "CONFIG.DATA.DECODER",
        lambda v: bool(v),
        "auto, pyav, opencv, torchcodec, decord, frames or a registered name",
    ),
    (
        "CONFIG.DATA.LIST_FORMAT",
        lambda v: v in ("auto", "gluoncv", "mmaction2", "mmaction2_rawframes", "pyslowfast"),
        "one of auto, gluoncv, mmaction2, mmaction2_rawframes, pyslowfast",
    ),
    (
        "CONFIG.DATA.FRAME_TEMPLATE",
        _frame_template_ok,
        "a file name pattern with one integer field, e.g. img_{:05d}.jpg (frames numbered from 1)",
    ),
    ("CONFIG.DATA.DECODE_THREADS", lambda v: v >= -1,
     "an integer >= -1 (0 = automatic, -1 = FFmpeg's choice)"),
    ("CONFIG.DATA.DECODE_TIMEOUT", _non_negative, "seconds >= 0 (0 = no limit)"),
    ("CONFIG.DATA.MAX_TRIES", _positive, "an integer >= 1"),
    ("CONFIG.DATA.MAX_BAD_FRACTION", lambda v: 0 <= v <= 1, "a share in [0, 1] (1 = never stop)"),
    ("CONFIG.DATA.LOADER_TIMEOUT", _non_negative, "seconds >= 0 (0 = wait forever)"),
    (
        "CONFIG.DATA.COLOR_JITTER",
        lambda v: len(v) == 4 and all(x >= 0 for x in v) and v[3] <= 0.5,
        "[brightness, contrast, saturation, hue], each >= 0, hue <= 0.5",
    ),
    (
        "CONFIG.DATA.RAND_AUGMENT",
        lambda v: v == "" or _RAND_AUGMENT.fullmatch(v) is not None,
        "\"\" (off) or a timm RandAugment policy such as rand-m7-n4-mstd0.5-inc1 (sections m, n, "
        "p, mstd, mmax, inc, t)",
    ),
    ("CONFIG.DATA.RANDOM_ERASE", lambda v: 0 <= v <= 1, "a probability in [0, 1] (0 = off)"),
    ("CONFIG.DATA.OFFICIAL_SPLIT", lambda v: v in (1, 2, 3), "1, 2 or 3"),
    ("CONFIG.DATA.SYNTHETIC.TRAIN_PER_CLASS", _positive, "an integer >= 1"),
    ("CONFIG.DATA.SYNTHETIC.VAL_PER_CLASS", _positive, "an integer >= 1"),
    ("CONFIG.DATA.SYNTHETIC.NUM_FRAMES", _positive, "an integer >= 1"),
    (
        "CONFIG.DATA.SYNTHETIC.SIZE",
        lambda v: v >= 16 and v % 2 == 0,
        "an even integer >= 16 (H.264 needs even sizes)",
    ),
    ("CONFIG.MODEL.KWARGS", lambda v: len(v) % 2 == 0, "a flat list of KEY, VALUE pairs"),
    ("CONFIG.MODEL.NAME", lambda v: bool(v), "a registered model name (see zoo.list_models())"),
    ("CONFIG.LOG.SAVE_FREQ", _positive, "an integer >= 1"),
    ("CONFIG.LOG.DISPLAY_FREQ", _positive, "an integer >= 1"),
    ("CONFIG.LOG.EXP_NAME", lambda v: bool(v) and "/" not in v, "a non-empty folder name"),
]


def validate_config(cfg: CfgNode) -> None:
    """Raise ConfigError on the first impossible value, naming the key and what is allowed."""
    for key, ok, allowed in _RULES:
        value = lookup_key(cfg, key)
        try:
            fits = ok(value)
        except (TypeError, ValueError, IndexError):  # entries of another type: ['a', 'b'], None
            fits = False
        if not fits:
            raise ConfigError(f"{key} = {value!r} is not allowed: expected {allowed}")
    train = cfg.CONFIG.TRAIN
    if train.LR_FACTORS and len(train.LR_FACTORS) != len(train.LR_MILESTONE) + 1:
        raise ConfigError(
            f"CONFIG.TRAIN.LR_FACTORS has {len(train.LR_FACTORS)} entries but CONFIG.TRAIN."
            f"LR_MILESTONE has {len(train.LR_MILESTONE)}: give one factor before the first "
            "milestone and one after each"
        )
    _check_warmup_end(train)
    if train.NESTEROV and (train.OPTIMIZER != "SGD" or train.MOMENTUM <= 0):
        raise ConfigError(
            f"CONFIG.TRAIN.NESTEROV True needs OPTIMIZER 'SGD' with MOMENTUM above 0 (they are "
            f"{train.OPTIMIZER!r} and {train.MOMENTUM!r}): set NESTEROV False, or use SGD with "
            "momentum")
    if str(train.COMPILE) == "True" and train.ACT_CHECKPOINT:
        raise ConfigError(
            "CONFIG.TRAIN.COMPILE True and CONFIG.TRAIN.ACT_CHECKPOINT True do not run together "
            "(torch.compile cannot trace how a recomputed block keeps BatchNorm's statistics): "
            "set one of them False (COMPILE auto stays off with ACT_CHECKPOINT)"
        )
    if "long" in train.MULTIGRID and train.LR_POLICY != "Step":
        raise ConfigError(
            f"CONFIG.TRAIN.MULTIGRID = {train.MULTIGRID!r} needs CONFIG.TRAIN.LR_POLICY Step (the "
            f"long cycle re-times the LR_MILESTONE steps), got {train.LR_POLICY!r}: set it to Step"
        )
    _check_strategy(cfg)
    data = cfg.CONFIG.DATA
    if data.CROP_SIZE > data.SHORT_SIDE_SIZE:
        raise ConfigError(
            f"CONFIG.DATA.CROP_SIZE = {data.CROP_SIZE} is larger than "
            f"CONFIG.DATA.SHORT_SIDE_SIZE = {data.SHORT_SIDE_SIZE}: the crop must fit inside the "
            "resized frame"
        )
    if data.TEST_SHORT_SIDE_SIZE and data.CROP_SIZE > data.TEST_SHORT_SIDE_SIZE:
        raise ConfigError(
            f"CONFIG.DATA.CROP_SIZE = {data.CROP_SIZE} is larger than "
            f"CONFIG.DATA.TEST_SHORT_SIDE_SIZE = {data.TEST_SHORT_SIDE_SIZE}: the test crops must "
            "fit inside the resized frame; raise TEST_SHORT_SIDE_SIZE (0 = SHORT_SIDE_SIZE)"
        )
    if data.NUM_SEGMENT > 1 and data.SAMPLING != "tsn":
        raise ConfigError(
            f"CONFIG.DATA.NUM_SEGMENT = {data.NUM_SEGMENT} is read only by CONFIG.DATA.SAMPLING "
            f"tsn, and SAMPLING is {data.SAMPLING!r}: set SAMPLING tsn, or NUM_SEGMENT 1"
        )
    if cfg.CONFIG.TRAIN.BATCH_SIZE % data.CLIPS_PER_VIDEO:
        raise ConfigError(
            f"CONFIG.TRAIN.BATCH_SIZE = {cfg.CONFIG.TRAIN.BATCH_SIZE} is not a multiple of "
            f"CONFIG.DATA.CLIPS_PER_VIDEO = {data.CLIPS_PER_VIDEO}: the batch counts clips, "
            f"{data.CLIPS_PER_VIDEO} from each video; make BATCH_SIZE a multiple of it"
        )
    if data.RESIZE_ON == "device":
        _check_resize_on_device(data)
    if data.CROP_SIZE > data.TRAIN_SHORT_SIDE_RANGE[0]:
        raise ConfigError(
            f"CONFIG.DATA.CROP_SIZE = {data.CROP_SIZE} is larger than CONFIG.DATA."
            f"TRAIN_SHORT_SIDE_RANGE[0] = {data.TRAIN_SHORT_SIDE_RANGE[0]}: raise the range's "
            "minimum"
        )


def lr_after_warmup(train: CfgNode) -> float:
    """The LR the schedule has where the warmup ends, before the linear scaling rule: LR for
    Cosine after the warmup (its decay starts there), the cosine's value at WARMUP_EPOCHS for one
    from epoch 0, LR times the factor of the step reached for Step."""
    if train.LR_POLICY != "Step":
        if train.get("COSINE_AFTER_WARMUP", True) or not train.USE_WARMUP:
            return float(train.LR)
        return cosine_lr(float(train.LR), float(train.WARMUP_EPOCHS), int(train.EPOCH_NUM))
    return step_lr(float(train.LR), train.WARMUP_EPOCHS, train.LR_MILESTONE, train.STEP,
                   train.LR_FACTORS)


def warmup_ends_on_schedule(train: CfgNode) -> bool:
    """Whether the warmup ends on the schedule's LR (WARMUP_END_LR 0 or equal to it), or there is
    no warmup to end."""
    end = float(train.WARMUP_END_LR)
    return (not train.USE_WARMUP or end == 0
            or math.isclose(end, lr_after_warmup(train), rel_tol=1e-6))


def _check_warmup_end(train: CfgNode) -> None:
    """A warmup that ends off the schedule makes the LR jump where it ends, and one that starts
    above its end lowers the LR (no published recipe does either; the second is the default
    WARMUP_START_LR left beside a small LR): refuse them. A cosine from epoch 0 that reaches 0
    before the warmup ends would leave nothing to train: refuse that first, naming the epochs."""
    if (train.USE_WARMUP and train.LR_POLICY != "Step"
            and not train.get("COSINE_AFTER_WARMUP", True)
            and float(train.WARMUP_EPOCHS) >= int(train.EPOCH_NUM)):
        raise ConfigError(
            f"CONFIG.TRAIN.WARMUP_EPOCHS = {train.WARMUP_EPOCHS!r} is not below CONFIG.TRAIN."
            f"EPOCH_NUM = {train.EPOCH_NUM!r}, and the cosine runs from epoch 0 "
            "(COSINE_AFTER_WARMUP False): it reaches 0 before the warmup ends, so the run "
            "would not train; lower WARMUP_EPOCHS below EPOCH_NUM or raise EPOCH_NUM")
    if not warmup_ends_on_schedule(train):
        raise ConfigError(
            f"CONFIG.TRAIN.WARMUP_END_LR = {train.WARMUP_END_LR!r} is not the LR the schedule has "
            f"where the warmup ends ({lr_after_warmup(train):.6g}, from CONFIG.TRAIN.LR = "
            f"{train.LR!r}), so the LR would jump there: set WARMUP_END_LR 0 (the warmup then "
            "ends on the schedule's LR, whatever LR is) or remove it from the config")
    end = lr_after_warmup(train)
    if train.USE_WARMUP and float(train.WARMUP_START_LR) > end:
        raise ConfigError(
            f"CONFIG.TRAIN.WARMUP_START_LR = {train.WARMUP_START_LR!r} is above the LR the warmup "
            f"ends on ({end:.6g}, from CONFIG.TRAIN.LR = {train.LR!r}), so the warmup would lower "
            "the LR: set WARMUP_START_LR below it (0 starts from nothing; PySlowFast's recipes "
            "start at about LR / 100)")


def _check_resize_on_device(data: CfgNode) -> None:
    """What DATA.RESIZE_ON device cannot be combined with (one line each): what needs the
    loader's resized crop."""
    conflicts = [
        ("NORMALIZE_ON", data.NORMALIZE_ON != "device", "device"),
        ("COLOR_JITTER", any(data.COLOR_JITTER), "[0, 0, 0, 0]"),
        ("RAND_AUGMENT", bool(data.RAND_AUGMENT), '""'),
        ("RANDOM_ERASE", data.RANDOM_ERASE > 0, "0"),
    ]
    for key, conflict, fix in conflicts:
        if conflict:
            raise ConfigError(
                f"CONFIG.DATA.RESIZE_ON = 'device' but CONFIG.DATA.{key} = "
                f"{getattr(data, key)!r} works on the crop the loader resizes: set {key} {fix} or "
                "RESIZE_ON loader"
            )


def _check_strategy(cfg: CfgNode) -> None:
    """What DDP_CONFIG.STRATEGY fsdp cannot be combined with (one line each)."""
    ddp = cfg.DDP_CONFIG
    if ddp.STRATEGY != "fsdp":
        return
    if ddp.GRAD_COMPRESSION != "none":
        raise ConfigError(
            f"DDP_CONFIG.GRAD_COMPRESSION = {ddp.GRAD_COMPRESSION!r} is a DDP communication hook "
            "and does not apply to DDP_CONFIG.STRATEGY fsdp: set GRAD_COMPRESSION none or "
            "STRATEGY ddp"
        )
    if cfg.CONFIG.TRAIN.EMA_DECAY > 0:
        raise ConfigError(
            f"CONFIG.TRAIN.EMA_DECAY = {cfg.CONFIG.TRAIN.EMA_DECAY} keeps an unsharded copy of the "
            "weights on every process, which DDP_CONFIG.STRATEGY fsdp exists to avoid: set "
            "EMA_DECAY 0 or STRATEGY ddp"
        )
