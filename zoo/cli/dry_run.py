"""``--dry-run`` of tools/train_ddp.py and tools/test_ddp.py: check a config without running it.

A dry run loads and validates the config (the caller has done that), builds the named model on
the meta device (no memory, no weights) and counts its parameters, says where the pretrained
weights would come from without downloading them (``zoo.models.weights.resolve_pretrained``), and
lists every missing data path, a weights source it cannot resolve, and every machine-dependent
problem (an nccl backend on a node without a GPU, WORLD_URLS that do not name
this host) as one warning line each. It passes when the config and the model are valid.

    result = dry_run(cfg, mode="train")   # DryRunResult; nothing printed
    print_report(result)
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
from typing import Any, List, Optional, Sequence

from .configure import setup_cfg

logger = logging.getLogger("zoo")

# Lists each mode reads: train reads the training and validation lists, test the test list (or
# the validation list when no test list is set), feature extraction the validation list.
_SPLITS = {"train": ("TRAIN", "VAL"), "test": ("TEST",), "features": ("VAL",)}


@dataclasses.dataclass
class DryRunResult:
    """What a dry run found.

    Attributes:
        model: Registered model name.
        num_classes: Classes of the head the model was built with.
        params: Parameter count of the built model.
        pretrained: Where the weights would come from ("random init", a local file, a tag's URL
            and its cache path).
        warnings: One line per missing data path, unresolvable weights source or
            machine-dependent problem.
        notes: Other facts worth a line (e.g. a feature-extraction config).
    """

    model: str
    num_classes: int
    params: int
    pretrained: str
    warnings: List[str] = dataclasses.field(default_factory=list)
    notes: List[str] = dataclasses.field(default_factory=list)


def describe_pretrained(value: Any, model_name: str) -> str:
    """Where ``CONFIG.MODEL.PRETRAINED`` would load weights from; nothing is loaded or downloaded.

    Raises:
        zoo.models.weights.WeightsError: the value names no file, tag or URL for this model.
    """
    from ..models.weights import resolve_pretrained

    return resolve_pretrained(value, model_name).describe()


def _data_warnings(cfg, mode: str) -> List[str]:
    data = cfg.CONFIG.DATA
    if data.SYNTHETIC.ENABLE:
        return []
    out = []
    for split in _SPLITS[mode]:
        if split == "TEST" and not data.TEST_ANNO_PATH:
            split = "VAL"  # the test tool reads the validation list when no test list is set
        for kind in ("ANNO", "DATA"):
            key = f"{split}_{kind}_PATH"
            path = data[key]
            if split == "TEST" and kind == "DATA" and not path:
                key, path = "VAL_DATA_PATH", data.VAL_DATA_PATH
            if kind == "ANNO" and not path:
                out.append(f"missing data: CONFIG.DATA.{key} is empty")
            elif path and not os.path.exists(path):
                out.append(f"missing data: CONFIG.DATA.{key} = {path!r} does not exist")
    if mode == "train" and not out:
        out += _label_warnings(cfg)
    return out


def _label_warnings(cfg) -> List[str]:
    """What a real run says about the training list's labels before training: labels beyond
    ``NUM_CLASSES``, fewer classes named than ``NUM_CLASSES``, or a list it cannot read (the list
    of a registered dataset recipe only; nothing is decoded)."""
    from ..data.build import check_label_count, check_named_count, dataset_kwargs
    from ..data.dataset_recipes import DatasetRecipe
    from ..data.lists.annotations import named_classes
    from ..data.registry import DATASET_REGISTRY
    from ..utils.errors import UserError

    entry = DATASET_REGISTRY.get(cfg.CONFIG.DATA.DATASET)
    if not isinstance(entry, DatasetRecipe):
        return []
    try:
        kwargs = dataset_kwargs(cfg, "train")
        videos = entry.read(**kwargs)
        where = f"CONFIG.DATA.TRAIN_ANNO_PATH = {kwargs['anno_path']!r}"
        labels = [r.label for r in videos.records]
        check_label_count(max(labels, default=-1) + 1, int(cfg.CONFIG.DATA.NUM_CLASSES), where)
        names = named_classes(videos.classes or [])
        if names:
            check_named_count(len(names), int(cfg.CONFIG.DATA.NUM_CLASSES), where)
    except UserError as e:
        return [f"{e} (a real run stops here)"]
    except OSError as e:
        return [f"training list: {e}"]
    return []


def _machine_warnings(cfg, node_rank: Optional[int]) -> List[str]:
    """Problems that depend on the node the command runs on (a real run stops on them)."""
    from ..launch.job import resolve_job
    from ..launch.topology import LaunchError

    try:
        resolve_job(cfg, node_rank=node_rank)
    except LaunchError as e:
        return [f"on this machine: {e}"]
    return []


def count_parameters(cfg, num_classes: int) -> int:
    """Build ``CONFIG.MODEL.NAME`` with ``MODEL.KWARGS`` on the meta device; its parameter count.

    On the meta device the model also sees one clip of the config's shape (nothing is computed),
    so a model that refuses it (an MViT built for another clip length or crop) stops the dry run
    with its one-line message rather than the first training step.
    """
    import torch

    from ..models.build import config_model_kwargs, create_model, model_facts
    from ..utils.errors import UserError

    kwargs = config_model_kwargs(cfg)
    try:
        with torch.device("meta"):
            model = create_model(cfg.CONFIG.MODEL.NAME, num_classes=num_classes, **kwargs)
    except (NotImplementedError, RuntimeError):
        # A builder that computes on tensors at construction time cannot run on meta.
        model = create_model(cfg.CONFIG.MODEL.NAME, num_classes=num_classes, **kwargs)
    if next(model.parameters(), torch.empty(0)).is_meta:
        data = cfg.CONFIG.DATA
        crop = (data.CROP_SIZE, data.CROP_SIZE)
        image = model_facts(cfg.CONFIG.MODEL.NAME).get("task") == "image"
        try:
            with torch.no_grad():
                model.eval()(torch.empty(1, 3, *(() if image else (data.CLIP_LEN,)), *crop,
                                         device="meta"))
        except UserError:
            raise
        except Exception:  # noqa: BLE001 - meta tensors cannot run every op; only the model's
            pass           # own refusals (UserError) say something about the config
    return sum(p.numel() for p in model.parameters())


def dry_run(cfg, mode: str = "train", node_rank: Optional[int] = None) -> DryRunResult:
    """Check a loaded config (see the module docstring); prints nothing.

    Args:
        cfg: The config from ``zoo.cli.configure.setup_cfg`` (validated, model name known).
        mode: "train", "test" or "features": which data lists are checked.
        node_rank: This node's rank when given on the command line.

    Raises:
        ValueError, TypeError: the model cannot be built with these arguments.
    """
    if mode not in _SPLITS:
        raise ValueError(f"mode must be one of {', '.join(_SPLITS)}, got {mode!r}")
    warnings = _data_warnings(cfg, mode)
    notes = []
    num_classes = int(cfg.CONFIG.DATA.NUM_CLASSES)
    if num_classes == 0 and mode == "train" and cfg.CONFIG.DATA.TRAIN_ANNO_PATH:
        from ..data import count_train_classes
        from ..utils.errors import UserError

        try:  # the count training finds (zoo.train.finetune.resolve_num_classes)
            num_classes = count_train_classes(cfg)
            notes.append(f"CONFIG.DATA.NUM_CLASSES 0: {num_classes} classes found in "
                         f"{cfg.CONFIG.DATA.TRAIN_ANNO_PATH}")
        except UserError:  # a missing or broken list is one of the warnings above
            pass
    if num_classes == 0:
        num_classes = 2
        source = {"train": "the training list",
                  "test": "the tested checkpoint",
                  "features": "a zoo checkpoint in MODEL.PRETRAINED (the features do not depend "
                              "on it)"}[mode]
        notes.append(f"CONFIG.DATA.NUM_CLASSES 0: the class count comes from {source}; "
                     "the model was checked with a 2-class head")
    if cfg.CONFIG.DATA.SYNTHETIC.ENABLE:
        notes.append("CONFIG.DATA.SYNTHETIC.ENABLE: the motion dataset is generated on first use")
    if mode == "test":
        ckpt = cfg.CONFIG.TEST.CHECKPOINT
        from ..launch.setup import checkpoint_dir
        from ..utils.checkpoint_io import latest_checkpoint

        where = ckpt or checkpoint_dir(cfg)[0]
        newest = None if ckpt or not os.path.isdir(where) else latest_checkpoint(where, False)
        what = (f"CONFIG.TEST.CHECKPOINT {ckpt}" if ckpt else
                f"{newest} (the newest in its folder)" if newest else
                f"the newest checkpoint in {where}")
        notes.append(f"tested weights: {what}")
        if not os.path.exists(where):
            warnings.append(f"missing data: the checkpoint {where!r} does not exist")
    if cfg.CONFIG.INFERENCE.FEAT and mode != "features":
        notes.append("CONFIG.INFERENCE.FEAT True: a feature-extraction config; run "
                     "tools/extract_features.py --config-file FILE")
    from ..models.weights import WeightsError

    if mode == "test" and cfg.CONFIG.MODEL.PRETRAINED:
        pretrained = (f"{cfg.CONFIG.MODEL.PRETRAINED}, not read by testing (the tested "
                      "checkpoint holds every weight)")
    else:
        try:
            pretrained = describe_pretrained(cfg.CONFIG.MODEL.PRETRAINED, cfg.CONFIG.MODEL.NAME)
        except WeightsError as e:
            # A file on another machine, or weights zoo cannot fetch: a real run stops here.
            pretrained = f"unresolved: {cfg.CONFIG.MODEL.PRETRAINED!r}"
            warnings.append(f"pretrained: {e}")
    if mode == "train" and cfg.CONFIG.MODEL.PRETRAINED:
        notes += _input_notes(cfg)
    warnings += _machine_warnings(cfg, node_rank)
    return DryRunResult(
        model=cfg.CONFIG.MODEL.NAME, num_classes=num_classes,
        params=count_parameters(cfg, num_classes), pretrained=pretrained,
        warnings=warnings, notes=notes,
    )


def _input_notes(cfg) -> List[str]:
    """A note where the clip differs from the one the model's published weights were trained on
    (its registered facts), when MODEL.PRETRAINED names them (a tag, or True): fine-tuning at
    another size works, but should be meant. A file or folder's own clip is not known."""
    from ..models.build import model_facts
    from ..models.weights import WeightsError, resolve_pretrained

    try:
        if not resolve_pretrained(cfg.CONFIG.MODEL.PRETRAINED, cfg.CONFIG.MODEL.NAME).tag:
            return []
    except WeightsError:  # reported among the warnings
        return []
    facts = model_facts(cfg.CONFIG.MODEL.NAME)
    if facts.get("task") != "video" or not facts.get("sampling_stride"):
        return []
    data = cfg.CONFIG.DATA
    published = (facts["input_frames"], facts["sampling_stride"], facts["crop_size"])
    if (data.CLIP_LEN, data.FRAME_RATE, data.CROP_SIZE) == published:
        return []
    return [f"{cfg.CONFIG.MODEL.NAME}'s published weights were trained on {published[0]} frames "
            f"{published[1]} apart at {published[2]} px; this config trains on CONFIG.DATA."
            f"CLIP_LEN {data.CLIP_LEN}, FRAME_RATE {data.FRAME_RATE}, CROP_SIZE "
            f"{data.CROP_SIZE}"]


def print_report(result: DryRunResult) -> None:
    """The dry run's console lines: model, weights, notes, one ``warning:`` line per problem."""
    logger.info("dry run: config is valid")
    logger.info("model: %s, %s parameters, %d classes (built on the meta device)", result.model,
                f"{result.params:,}", result.num_classes)
    logger.info("pretrained: %s", result.pretrained)
    for note in result.notes:
        logger.info("note: %s", note)
    for line in result.warnings:
        logger.warning("warning: %s", line)
    logger.info("dry run passed (%d warning%s); nothing was trained, loaded or downloaded",
                len(result.warnings), "" if len(result.warnings) == 1 else "s")


def dry_run_file(config_file: str, opts: Sequence[str] = (), mode: str = "train",
                 extra_modules: Sequence[str] = ()) -> DryRunResult:
    """Load ``config_file`` as the tools do (:func:`zoo.cli.configure.setup_cfg`) and
    :func:`dry_run` it in this process; what ``--dry-run`` checks, for many configs without a
    process each."""
    args = argparse.Namespace(config_file=config_file, opts=list(opts),
                              extra_modules=list(extra_modules))
    return dry_run(setup_cfg(args), mode)


def run_dry_run(cfg, mode: str, node_rank: Optional[int] = None) -> int:
    """``--dry-run`` of the tools: check, print, and return the exit code (0 = valid)."""
    from ..utils.errors import UserError

    try:
        result = dry_run(cfg, mode, node_rank)
    except UserError:
        raise  # its own line (a config key and the fix) and exit code
    except (TypeError, ValueError) as e:  # the builder refused its arguments
        logger.error("error: model %s cannot be built with CONFIG.MODEL.KWARGS %s: %s",
                     cfg.CONFIG.MODEL.NAME, list(cfg.CONFIG.MODEL.KWARGS), e)
        return 1
    print_report(result)
    return 0
