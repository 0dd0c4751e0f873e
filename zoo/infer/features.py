"""Feature extraction: the pooled features a model feeds its classifier, one ``.npy`` per video.

gluoncv.torch's ``*_feat.yaml`` configs (``CONFIG.INFERENCE.FEAT: True``) run here unedited. The
videos are those of the validation list (``CONFIG.DATA.VAL_ANNO_PATH`` / ``VAL_DATA_PATH``), each
read as one validation clip (centre window, centre crop), as gluoncv's feat_extract_pytorch.py
does. The features are the input of the model's classifier layer
(``zoo.models.classifier.find_classifier``: ``model.classifier_name`` or the last ``nn.Linear``;
a last ``nn.Linear`` without ``NUM_CLASSES`` outputs is not taken for it: one line says which
layer to name), caught by a forward hook, so every model works without a feature method of its
own. Models that classify frames one by one (TSN, 2D ResNets) fold time into the batch; their
per-frame features are averaged, as their logits are.

Layout: ``OUT/<the video's path in the list, extension replaced by .npy>``, a float32 array of
shape ``(D,)``. A list entry that is a part of its video gets the part in its name: a time range
(CSV ``start``/``end``) ``clip@12.5s-20s.npy`` (``@0s-`` / ``-end`` for an open side), frames
of a frame folder (MMAction2 rawframe offsets) ``clip@frames11-40.npy``. Two entries that would
write the same file (a video listed twice, ``x.mp4`` beside ``x.webm``) stop the run before any
is read. ``OUT`` is ``--output``, else ``BASE_PATH/EXP_NAME/SAVE_DIR`` for a config with
``INFERENCE.FEAT`` True (gluoncv's folder), else ``BASE_PATH/EXP_NAME/features``.

With ``window`` (``--window S [--stride T]``) each video is read window by window instead, each
window as one validation clip of its seconds: the file holds ``(W, D)``, one row per window, and
``<name>.windows.npy`` beside it the windows' ``(W, 2)`` start and end seconds (within a listed
time range, when the entry has one). A video with a window that cannot be read gets no file.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn

from ..data.lists.records import AnnotationError, VideoRecord
from ..models.classifier import checked_classifier, find_classifier

logger = logging.getLogger("zoo")


@contextlib.contextmanager
def classifier_inputs(model: nn.Module) -> Iterator[List[torch.Tensor]]:
    """While open, each forward of ``model`` appends its classifier's input to the yielded list."""
    caught: List[torch.Tensor] = []

    def hook(_module: nn.Module, inputs, _output) -> None:
        caught.append(inputs[0].detach())

    handle = find_classifier(model).register_forward_hook(hook)
    try:
        yield caught
    finally:
        handle.remove()


@torch.no_grad()
def pooled_features(model: nn.Module, clips: torch.Tensor) -> torch.Tensor:
    """Features ``(B, D)`` that ``model`` feeds its classifier for a batch of ``B`` clips."""
    with classifier_inputs(model) as caught:
        model(clips)
    if len(caught) != 1:
        raise RuntimeError(f"the classifier of {type(model).__name__} ran {len(caught)} times in "
                           "one forward; set model.classifier_name to the layer to read")
    feats = caught[0].flatten(1) if caught[0].dim() > 2 else caught[0]
    batch = clips[0].shape[0] if isinstance(clips, (list, tuple)) else clips.shape[0]
    if feats.shape[0] != batch:
        if feats.shape[0] % batch:
            raise RuntimeError(f"classifier input has {feats.shape[0]} rows for {batch} clips")
        # Frames folded into the batch (TSN / 2D nets): average them like the logits are.
        feats = feats.view(batch, feats.shape[0] // batch, -1).mean(dim=1)
    return feats.float()


def feature_dir(cfg, output: Optional[str] = None) -> str:
    """Where the ``.npy`` files go (see the module docstring)."""
    if output:
        return output
    log = cfg.CONFIG.LOG
    sub = log.SAVE_DIR if cfg.CONFIG.INFERENCE.FEAT else "features"
    return os.path.join(log.BASE_PATH, log.EXP_NAME, sub)


def feature_path(out_dir: str, rel_path: str, record: Optional[VideoRecord] = None) -> str:
    """``out_dir/rel_path`` with the extension replaced by ``.npy`` (folders mirrored), and the
    part of the video ``record`` covers when it is one (see the module docstring)."""
    rel = os.path.normpath(rel_path).lstrip(os.sep)
    if rel.startswith(".."):
        rel = os.path.basename(rel)  # a path outside the data root: keep only its file name
    stem = os.path.splitext(rel)[0]
    if record is not None and (record.start >= 0 or record.end >= 0):
        end = f"{record.end:g}s" if record.end >= 0 else "end"
        stem += f"@{max(record.start, 0.0):g}s-{end}"
    elif record is not None and record.offset > 0:
        stem += f"@frames{record.offset + 1}-{record.offset + max(record.num_frames, 0)}"
    return os.path.join(out_dir, stem + ".npy")


def feature_paths(out_dir: str, records: Sequence[VideoRecord], where: str) -> List[str]:
    """Each record's feature file (:func:`feature_path`).

    Raises:
        AnnotationError: Two records would write the same file (one line naming both).
    """
    paths, first = [], {}
    for record in records:
        path = feature_path(out_dir, record.path, record)
        if path in first:
            raise AnnotationError(
                f"{where}: {first[path]!r} and {record.path!r} would both write {path}: list "
                "each video (or part of one) once, and rename videos whose names differ only "
                "in their extension")
        first[path] = record.path
        paths.append(path)
    return paths


def _save(path: str, array: np.ndarray) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    tmp = path + ".tmp.npy"
    np.save(tmp, array)
    os.replace(tmp, path)  # never a half-written file under the final name


def feature_model(cfg) -> Tuple[object, nn.Module]:
    """``(cfg, model)`` with the weights ``MODEL.PRETRAINED`` names. A zoo run's checkpoint is
    built as testing builds it (:func:`~zoo.infer.checkpoint_model.checkpoint_model`: its
    recorded model and class count, so ``NUM_CLASSES 0`` needs no training list, and its EMA
    weights when it was trained with EMA); other weights load into the configured model, with
    the model's own class count for ``NUM_CLASSES 0`` (the features do not depend on it)."""
    from ..models import build_model
    from ..models.build import model_facts
    from .checkpoint_model import checkpoint_model, read_zoo_run

    path = cfg.CONFIG.MODEL.PRETRAINED
    state = read_zoo_run(path)
    if state is None:
        if cfg.CONFIG.DATA.NUM_CLASSES == 0:
            cfg = cfg.clone()
            cfg.defrost()
            cfg.CONFIG.DATA.NUM_CLASSES = model_facts(cfg.CONFIG.MODEL.NAME).get(
                "num_classes") or 400
            cfg.freeze()
        return cfg, build_model(cfg)
    cfg, model, _ = checkpoint_model(cfg, path, state)
    logger.info("loaded the weights of %s (a zoo checkpoint%s)", path,
                ", its EMA weights" if state.get("ema") else "")
    return cfg, model


def extract_features(cfg, output: Optional[str] = None, batch_size: int = 0,
                     device: Optional[torch.device] = None, window: float = 0.0,
                     stride: float = 0.0) -> Dict[str, object]:
    """Write one ``.npy`` per video of the validation list; returns a summary.

    Args:
        cfg: Loaded config (``cli.setup_cfg``); ``MODEL.PRETRAINED`` names the weights.
        output: Output folder (default: :func:`feature_dir`).
        batch_size: Clips per forward (0 = ``CONFIG.VAL.BATCH_SIZE``).
        device: Default: the first GPU when there is one, else the CPU.
        window: Seconds per window (0 = one clip per video; see the module docstring).
        stride: Seconds between window starts (0 = ``window``).

    Returns:
        ``{"output": folder, "written": count, "dim": D, "unreadable": [paths]}``.
    """
    from ..data import build_dataset

    device = device or torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out_dir = feature_dir(cfg, output)
    dataset = build_dataset(cfg, "val")
    targets = feature_paths(out_dir, dataset.records,
                            f"CONFIG.DATA.VAL_ANNO_PATH = {cfg.CONFIG.DATA.VAL_ANNO_PATH!r}")
    cfg, model = feature_model(cfg)
    checked_classifier(model, cfg.CONFIG.DATA.NUM_CLASSES, "feature extraction",
                       cfg.CONFIG.MODEL.NAME)
    model = model.to(device).eval()
    batch = batch_size or cfg.CONFIG.VAL.BATCH_SIZE
    unreadable: List[str] = []
    if window > 0:
        written, dim = _extract_windows(cfg, dataset, targets, model, device, batch,
                                        (window, stride or window), unreadable)
    else:
        written, dim = 0, 0
        for index, feats in _features(cfg, dataset, model, device, batch, unreadable):
            _save(targets[index], feats)
            written, dim = written + 1, feats.shape[0]
    for path in unreadable:
        logger.warning("warning: no features for %s: the video could not be read", path)
    missing = (f"; {len(unreadable)} video{'s' if len(unreadable) > 1 else ''} could not be "
               "read and got none (named above)") if unreadable else ""
    logger.info("wrote %d feature files (%d floats each) under %s%s", written, dim, out_dir,
                missing)
    return {"output": out_dir, "written": written, "dim": dim, "unreadable": unreadable}


def _features(cfg, dataset, model: nn.Module, device: torch.device, batch: int,
              unreadable: List[str]) -> Iterator[Tuple[int, np.ndarray]]:
    """``(item index, its (D,) features)`` in the dataset's order; an item the loader had to
    stand another video in for is named in ``unreadable`` instead."""
    from ..data.workers import check_worker_imports, worker_context

    workers = cfg.CONFIG.DATA.NUM_WORKERS
    check_worker_imports(dataset, cfg.CONFIG.DATA.WORKER_START_METHOD, workers)
    loader = torch.utils.data.DataLoader(
        dataset, batch_size=batch, shuffle=False, num_workers=workers,
        multiprocessing_context=worker_context(cfg.CONFIG.DATA.WORKER_START_METHOD)
        if workers else None)
    start = 0
    for batch in loader:  # fields after (clip, label, index, n_bad) left aside, as in training
        clips, indices = batch[0], batch[2]
        feats = pooled_features(model, clips.to(device)).cpu().numpy()
        for j, returned in enumerate(indices.tolist()):
            wanted = start + j
            if returned != wanted:  # the loader stood another video in for an unreadable one
                unreadable.append(dataset.paths[wanted])
                continue
            yield wanted, feats[j]
        start += len(indices)


def _extract_windows(cfg, dataset, targets: List[str], model: nn.Module, device: torch.device,
                     batch: int, cut: Tuple[float, float], unreadable: List[str]
                     ) -> Tuple[int, int]:
    """The windowed extraction (see the module docstring); returns ``(files written, D)``."""
    from ..data.decode.base import DecodeError
    from .windows import parts_dataset, video_span, windows

    spans: List[Tuple[float, float]] = []  # every window's seconds, video after video
    ranges: List[Tuple[int, int, int]] = []  # per video read: (its index, first, end window)
    for index, (path, record) in enumerate(zip(dataset.paths, dataset.records)):
        try:
            shown, ends = video_span(path, cfg.CONFIG.DATA.DECODER)
        except DecodeError:
            unreadable.append(path)
            continue
        first = max(record.start, shown)
        last = min(record.end, ends) if record.end > 0 else ends
        lo = len(spans)
        spans += windows(first, last, *cut)
        ranges.append((index, lo, len(spans)))
    written, dim, bad = 0, 0, set(unreadable)
    window_set = parts_dataset(cfg, "val", [
        (dataset.paths[index], dataset.records[index].label, a, b)
        for index, lo, hi in ranges for a, b in spans[lo:hi]])
    collected: Dict[int, np.ndarray] = {}  # the windows of videos not written yet
    pending = iter(ranges)
    video = next(pending, None)

    def finish(index: int, lo: int, hi: int) -> None:
        nonlocal written, dim
        rows = [collected.pop(k, None) for k in range(lo, hi)]
        if any(r is None for r in rows):
            bad.add(dataset.paths[index])
            return
        _save(targets[index], np.stack(rows))
        _save(targets[index][:-len(".npy")] + ".windows.npy",
              np.asarray(spans[lo:hi], dtype=np.float32))
        written, dim = written + 1, rows[0].shape[0]

    for k, feats in _features(cfg, window_set, model, device, batch, []):
        while video is not None and video[2] <= k:  # videos whose windows are all past
            finish(*video)
            video = next(pending, None)
        collected[k] = feats
    while video is not None:
        finish(*video)
        video = next(pending, None)
    unreadable[:] = [p for p in dataset.paths if p in bad]
    return written, dim
