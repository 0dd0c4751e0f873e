"""Multi-view testing of a checkpoint: test_metrics.json and a per-video predictions CSV."""

from __future__ import annotations

import csv
import json
import os
from typing import Optional

from ..data import build_loader
from ..launch.setup import (
    checkpoint_dir,
    job_config,
    set_aside_outputs,
    this_process,
    worker_setup,
)
from ..utils import comm
from ..utils.checkpoint_io import latest_checkpoint
from .checkpoint_model import checkpoint_model
from .evaluator import evaluate
from .plots import confusion_matrix, write_confusion

# What a test writes into the run's folder. An earlier test's are moved aside when a test starts
# (by zoo-test before its data checks, and by rank 0 here), so a test that stops (too many bad
# videos, a wrong list) leaves no earlier numbers to be taken for its own; test_metrics.json
# names the list it scored.
TEST_OUTPUTS = ("test_metrics.json", "predictions.csv", "confusion_matrix.csv",
                "confusion_matrix.png")


def find_test_checkpoint(cfg, out_dir: str = "") -> str:
    """CONFIG.TEST.CHECKPOINT, else the newest epoch checkpoint of the run in its checkpoint
    folder (:func:`zoo.launch.setup.checkpoint_dir`; ``out_dir/<SAVE_DIR>`` when it is the run's
    own and ``out_dir`` is given). A mid-epoch one a preemption left is a place to resume from,
    not a result to test."""
    if cfg.CONFIG.TEST.CHECKPOINT:
        return cfg.CONFIG.TEST.CHECKPOINT
    folder, source = checkpoint_dir(cfg)
    if not source and out_dir:
        folder = os.path.join(out_dir, cfg.CONFIG.LOG.SAVE_DIR)
    path = latest_checkpoint(folder, mid_epoch=False)
    if path is None:
        raise FileNotFoundError(
            f"no checkpoint in {folder}; train first or set CONFIG.TEST.CHECKPOINT to a "
            "checkpoint file"
        )
    return path


def set_aside_test_outputs(out_dir: str) -> Optional[str]:
    """Moves an earlier test's :data:`TEST_OUTPUTS` from ``out_dir`` into
    ``earlier_test_<UTC time>/`` there (returned; None when there are none)."""
    return set_aside_outputs(out_dir, TEST_OUTPUTS, "test")


def tested_list(cfg) -> str:
    """The annotation list (or data folder) the test split reads, absolute: TEST_ANNO_PATH, else
    VAL_ANNO_PATH."""
    from ..data.build import dataset_kwargs

    return os.path.abspath(dataset_kwargs(cfg, "test")["anno_path"])


def write_predictions(path: str, dataset, raw: dict) -> None:
    """One row per video: path, label, predicted class, its probability, and the top-K class
    names one per column (``top1`` .. ``topK``, K = min(5, number of classes); names such as
    "air drumming" hold spaces)."""
    classes = list(getattr(dataset, "classes", []))

    def name(c: int) -> str:
        return classes[c] if c < len(classes) else str(c)

    k = min(5, raw["probs"].shape[1]) if raw["probs"].numel() else 1
    with open(path, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["video", "label", "label_name", "pred", "pred_name", "prob",
                    *(f"top{i + 1}" for i in range(k))])
        for idx, probs, label in zip(raw["index"].tolist(), raw["probs"], raw["labels"].tolist()):
            top = probs.topk(k)
            pred = int(top.indices[0])
            w.writerow([
                dataset.paths[idx], label, name(label), pred, name(pred),
                f"{float(top.values[0]):.4f}", *(name(int(c)) for c in top.indices),
            ])


def views_per_video(cfg, dataset) -> int:
    """The views ``dataset`` scores each test video with, as its settings give them: an image
    source fixes TEST_NUM_SEGMENT to 1, so an image has TEST_NUM_CROP views. A dataset of the
    user's without zoo's clip settings: TEST_NUM_SEGMENT x TEST_NUM_CROP of the config."""
    settings = getattr(dataset, "settings", None)
    if settings is not None and hasattr(settings, "test_num_segment"):
        return int(settings.test_num_segment * settings.test_num_crop)
    return cfg.CONFIG.DATA.TEST_NUM_SEGMENT * cfg.CONFIG.DATA.TEST_NUM_CROP


def test(cfg, overrides=()) -> dict:
    """Evaluate a checkpoint on the test list with TEST_NUM_SEGMENT x TEST_NUM_CROP views
    (TEST_NUM_CROP for images, :func:`views_per_video`) (``zoo.test(cfg)``): this process's
    share of the job, inside the process group the caller set up or none (as
    :func:`zoo.train.trainer.train`; ``tools/test_ddp.py`` runs it in every process through
    :func:`test_worker`).

    The model is the checkpoint's (see zoo/infer/checkpoint_model.py); MODEL.PRETRAINED is not
    read. Rank 0 moves an earlier test's outputs in BASE_PATH/EXP_NAME aside when it starts
    (:func:`set_aside_test_outputs`) and writes test_metrics.json, predictions.csv and the confusion
    matrix there when the test is complete.

    Args:
        cfg: A config or the path of a YAML file (see :func:`zoo.launch.setup.job_config`).
        overrides: ``KEY VALUE`` pairs applied to ``cfg``, as on the command line.

    Returns:
        The test_metrics.json dict (``top1``, ``top5``, ``mean_class_acc``, ``loss``,
        ``num_videos`` scored, ``views``, ``skipped_videos``, ``checkpoint``, ``list``: the
        annotation list or folder tested, absolute, and ``listed_videos``: the videos it
        names), on every rank.
    """
    cfg = job_config(cfg, overrides)
    with this_process(cfg):
        return _test(cfg)


def test_worker(cfg) -> None:
    """What ``launch`` runs in every process of ``zoo-test``: :func:`test` of ``cfg``, whose
    ``DATA.MEAN`` / ``STD`` source the command line has logged already."""
    cfg = job_config(cfg, announce=False)
    with this_process(cfg):
        _test(cfg)


def _test(cfg) -> dict:
    logger, device, out_dir = worker_setup(cfg, write_config=False)
    if comm.is_main_process():
        set_aside_test_outputs(out_dir)
    ckpt_path = find_test_checkpoint(cfg, out_dir)
    # Model name, kwargs and class count come from the checkpoint (a warning names differences);
    # the test data's class ids follow the class names it recorded.
    cfg, model, classes = checkpoint_model(cfg, ckpt_path)
    model.to(device)
    loader = build_loader(cfg, "test", classes=classes)
    views = views_per_video(cfg, loader.dataset)
    logger.info("testing %s on %d videos x %d views", ckpt_path, len(loader.dataset), views)
    m = evaluate(model, loader, device, progress=cfg.CONFIG.LOG.PROGRESS_BAR,
                 num_classes=cfg.CONFIG.DATA.NUM_CLASSES, model_name=cfg.CONFIG.MODEL.NAME)
    result = {
        "top1": m["top1"], "top5": m["top5"], "mean_class_acc": m["mean_class_acc"],
        "loss": m["loss"], "num_videos": m["num_videos"], "views": views,
        "skipped_videos": m["skipped_videos"], "checkpoint": os.path.abspath(ckpt_path),
        "list": tested_list(cfg), "listed_videos": len(loader.dataset),
    }
    logger.info(
        "test: top1 %.2f top5 %.2f mean-class %.2f on %d videos (%d views each)",
        m["top1"], m["top5"], m["mean_class_acc"], m["num_videos"], views,
    )
    if comm.is_main_process():
        with open(os.path.join(out_dir, "test_metrics.json"), "w", encoding="utf-8") as f:
            json.dump(result, f, indent=2)
        write_predictions(os.path.join(out_dir, "predictions.csv"), loader.dataset, m["_raw"])
        raw = m["_raw"]
        matrix = confusion_matrix(raw["probs"].argmax(dim=1), raw["labels"],
                                  cfg.CONFIG.DATA.NUM_CLASSES)
        write_confusion(matrix, list(getattr(loader.dataset, "classes", [])),
                        os.path.join(out_dir, "confusion_matrix.csv"),
                        os.path.join(out_dir, "confusion_matrix.png"))
        logger.info("wrote %s", os.path.join(out_dir, "test_metrics.json"))
    return result
