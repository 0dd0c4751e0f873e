"""Data checks made once, in the main process, before any worker starts.

A wrong data path or list otherwise surfaces inside every worker (N tracebacks), or only after
``MAX_TRIES`` failed reads per video. Here each split's list is read with the dataset the config
names (so every list format and source it understands is understood here too) and checked:

* the list exists and has videos, and parses (AnnotationError / ConfigError from the reader);
* labels stay below ``CONFIG.DATA.NUM_CLASSES`` when it is > 0, and validation's class ids mean
  what training's do (``build_dataset`` checks both);
* the data folder exists, and the first videos of the list are found in it;
* the first video of the list decodes with ``CONFIG.DATA.DECODER`` (the next ones are tried when
  it is unreadable): a decoding library that does not work here (an API its installed release does
  not have, a part of it that cannot load) stops the job now, with one line naming the library,
  its version and the call, instead of every video being skipped as unreadable in the workers;
  a long video whose clips decode from its start (AVI, MPEG-TS) gets a warning that re-encoding
  loads it faster;
* training: no video is listed with two labels (a warning);
* validation: its videos are not training videos too (a warning: the same list or folder given
  twice flatters the model);
* training: /dev/shm holds the batches the loader workers hand over (a warning when it is too
  small, as Docker's 64 MB default is);
* training: ``CONFIG.TRAIN.BATCH_SIZE`` is not larger than the clips each process gets (its videos x
  ``CONFIG.DATA.CLIPS_PER_VIDEO``), with the
  loader's own arithmetic (a DistributedSampler without drop_last gives each of W processes
  ``ceil(N / W)`` videos; the loader drops the last partial batch, so fewer than BATCH_SIZE videos
  make no batch at all).
"""

from __future__ import annotations

import logging
import math
import os
import shutil
from typing import TYPE_CHECKING, List, Optional, Sequence, Set

from ..config import ConfigError

if TYPE_CHECKING:
    from ..launch.job import JobSpec

logger = logging.getLogger(__name__)

# How many of a list's first videos are looked for on disk; all of them missing means the data
# folder is wrong (a few missing videos are skipped and counted by the loader instead).
_PROBE = 20
# How many of a list's first videos are tried until one decodes (the decoding check).
_DECODE_PROBE = 3


def _data_key(cfg, split: str) -> str:
    """The config key the data folder of ``split`` comes from (build.py's test -> val fallback)."""
    data = cfg.CONFIG.DATA
    if split == "train":
        return "CONFIG.DATA.TRAIN_DATA_PATH"
    if split == "test" and data.TEST_ANNO_PATH and data.TEST_DATA_PATH:
        return "CONFIG.DATA.TEST_DATA_PATH"
    return "CONFIG.DATA.VAL_DATA_PATH"


def _check_videos_found(cfg, split: str, dataset, data_path: str) -> None:
    if getattr(dataset, "root", data_path) != data_path:
        return  # found in a folder of class folders, not under the data path (unused then)
    key = _data_key(cfg, split)
    paths = list(getattr(dataset, "paths", []))[:_PROBE]
    found = any(os.path.exists(p) for p in paths)
    if all(os.path.isabs(r.path) for r in getattr(dataset, "records", [])[:_PROBE]) and paths:
        if not found:  # a list written on another machine: the data path does not apply
            raise ConfigError(
                f"none of the first {len(paths)} videos of the {split} list exists (e.g. "
                f"{paths[0]!r}), and its paths are absolute, so {key} does not apply to them: "
                f"write the list's paths relative to the data folder and set {key} to it")
        return
    if not os.path.isdir(data_path):
        what = "is not a folder" if os.path.exists(data_path) else "does not exist"
        raise ConfigError(f"{key} = {data_path!r} {what}: set it to the folder the "
                          f"{split} list's paths are relative to")
    if paths and not found:
        raise ConfigError(
            f"none of the first {len(paths)} videos of the {split} list is in {key} = "
            f"{data_path!r} (e.g. {paths[0]!r} does not exist): is {key} the folder the list's "
            "paths are relative to?"
        )


def _check_decoding(split: str, dataset) -> None:
    """Decode the first readable one of the list's first videos (see the module docstring).

    A :class:`~zoo.data.decode.base.DecoderLibraryError` passes through and stops the job;
    unreadable videos only warn: the loader skips and counts them (``MAX_BAD_FRACTION``).
    """
    from ..data.decode.base import DecodeError, one_line

    probe = getattr(dataset, "probe", None)
    if probe is None:  # a dataset of the user's own, or generated clips: nothing to decode here
        return
    reasons = []
    for index in range(min(len(dataset), _DECODE_PROBE)):
        try:
            advice = probe(index)
        except DecodeError as e:
            reasons.append(one_line(e))
            continue
        if advice:
            logger.warning("data check: %s", advice)
        return
    if reasons:
        logger.warning("data check: the first %d videos of the %s list could not be decoded "
                       "(%s); training skips unreadable videos", len(reasons), split,
                       "; ".join(reasons))


def processes_at_least(spec: JobSpec) -> int:
    """How many processes the job of ``spec`` has (a lower bound when other nodes' counts are
    unknown)."""
    if not spec.distributed:
        return 1
    if spec.world_size:
        return int(spec.world_size)
    # Other nodes run at least one process each.
    return max(1, spec.local_procs) + max(0, spec.num_nodes - 1)


def check_batch_size(cfg, num_videos: int, processes: int) -> None:
    """Raise ConfigError when no process would get one full training batch."""
    batch = int(cfg.CONFIG.TRAIN.BATCH_SIZE)
    # The batch counts clips; CLIPS_PER_VIDEO of them come from each video.
    clips = int(cfg.CONFIG.DATA.CLIPS_PER_VIDEO)
    per_process = math.ceil(num_videos / max(1, processes))
    if per_process * clips < batch:
        per_video = f" (CONFIG.DATA.CLIPS_PER_VIDEO = {clips} clips each)" if clips > 1 else ""
        raise ConfigError(
            f"CONFIG.TRAIN.BATCH_SIZE = {batch} is larger than the {per_process} training "
            f"videos{per_video} each of the {processes} process(es) gets ({num_videos} in "
            f"{cfg.CONFIG.DATA.TRAIN_ANNO_PATH}), so no full batch exists: lower it to at most "
            f"{max(1, per_process) * clips}"
        )


def check_shared_memory(cfg, local_procs: int, folder: str = "/dev/shm") -> None:
    """Warn when the training loaders of this node need more shared memory than ``folder`` has
    free (a container's /dev/shm: Docker gives 64 MB). Loader workers hand every batch over in
    it, and one that finds none dies mid-run (a bus error, "No space left on device").

    The need counted is a lower bound: the batches torch keeps in flight per worker (its
    prefetch factor, 2) of uint8 clips of CROP_SIZE², for every training process of the node;
    kept buffers (``DATA.BATCH_BUFFERS_PER_WORKER``) and larger frames come on top.
    """
    from ..data.sampling import frames_per_clip

    data = cfg.CONFIG.DATA
    workers = int(data.NUM_WORKERS)
    if workers <= 0 or not os.path.isdir(folder):
        return
    frames = frames_per_clip(int(data.CLIP_LEN), str(data.SAMPLING), int(data.NUM_SEGMENT))
    batch = int(cfg.CONFIG.TRAIN.BATCH_SIZE) * frames * int(data.CROP_SIZE) ** 2 * 3
    need = max(1, local_procs) * workers * 2 * batch
    free = shutil.disk_usage(folder).free
    if need > free:
        logger.warning(
            "data check: the training loaders need at least %.0f MB of shared memory (%d "
            "process(es) x %d workers x 2 batches in flight x %.0f MB) and %s has %.0f MB free: "
            "workers would die mid-run (bus error). Give the container more (docker run "
            "--shm-size=%dg), or lower CONFIG.DATA.NUM_WORKERS or CONFIG.TRAIN.BATCH_SIZE",
            need / 2**20, max(1, local_procs), workers, batch / 2**20, folder, free / 2**20,
            max(1, math.ceil(4 * need / 2**30)))


def _items(dataset) -> List[tuple]:
    """``(file, start, end, offset)`` of each item of a list-backed dataset (none for another
    kind): the same file's other time range, or a frame folder's other run of frames (MMAction2's
    offset lists), is another item."""
    paths, records = getattr(dataset, "paths", None), getattr(dataset, "records", None)
    if not paths or not records or len(paths) != len(records):
        return []
    # (abspath, not realpath: no file system call for each of a long list's videos)
    return [(os.path.abspath(p), r.start, r.end, r.offset) for p, r in zip(paths, records)]


def _check_held_out(val_dataset, train_items: Set[tuple]) -> None:
    """Warn when validation videos are training videos too (the same list or class folder given
    twice, lists made by hand): its accuracy then flatters the model."""
    items = _items(val_dataset)
    shared = [i for i, item in enumerate(items) if item in train_items]
    if shared:
        logger.warning(
            "data check: %d of the %d validation videos are training videos too (e.g. %s): "
            "validation accuracy is then measured partly on training data; give "
            "CONFIG.DATA.VAL_ANNO_PATH a held-out list (zoo-build-lists-from-folders makes both "
            "from class folders)", len(shared), len(items), val_dataset.paths[shared[0]])


def _check_one_label_each(dataset, items: List[tuple]) -> None:
    """Warn when the training list gives one video (or one time range of it) two labels: a
    single-label classifier is then taught both, and scored right on neither. ``items`` are the
    dataset's :func:`_items`."""
    labels: dict = {}
    for item, label in zip(items, getattr(dataset, "labels", [])):
        labels.setdefault(item, set()).add(label)
    torn = [item for item, found in labels.items() if len(found) > 1]
    if torn:
        names = getattr(dataset, "classes", [])
        shown = ", ".join(names[i] if i < len(names) else str(i) for i in sorted(labels[torn[0]]))
        logger.warning(
            "data check: %d training video(s) are listed with two or more labels (e.g. %s: %s): "
            "a single-label model learns both; keep one line per video (or time range)",
            len(torn), torn[0][0], shown)


def check_data(cfg, splits: Sequence[str], spec: Optional[JobSpec] = None) -> None:
    """Check the lists and data folders of ``splits`` (see the module docstring).

    The validation split is checked only when ``CONFIG.DATA.VAL_ANNO_PATH`` is set (training
    validates only then). For "test" the labels are not compared with NUM_CLASSES here: the
    tester takes the class count from the checkpoint and checks them itself.

    Args:
        cfg: The merged config.
        splits: "train", "val", "test".
        spec: The job's spec (``zoo.launch.job.resolve_job``), for the process count; resolved
            here from ``cfg`` when not given.

    Raises:
        ConfigError, AnnotationError: one line naming the key or file and what to change.
        LaunchError: no spec given, and the topology is impossible here.
    """
    from ..data import build_dataset
    from ..data.build import dataset_kwargs
    from ..data.lists.annotations import named_classes

    if spec is None:
        # First: a topology that cannot work (WORLD_URLS, ranks) is the more basic error.
        from ..launch.job import resolve_job

        spec = resolve_job(cfg)
    processes = processes_at_least(spec)
    train_classes: Sequence[str] = ()
    train_items: Set[tuple] = set()
    for split in splits:
        if split == "val" and not cfg.CONFIG.DATA.VAL_ANNO_PATH:
            continue
        split_cfg = cfg
        data = cfg.CONFIG.DATA
        # (Synthetic data is generated for NUM_CLASSES classes: nothing to compare.)
        if split == "test" and data.NUM_CLASSES > 0 and not data.SYNTHETIC.ENABLE:
            split_cfg = cfg.clone()
            split_cfg.defrost()
            split_cfg.CONFIG.DATA.NUM_CLASSES = 0
            split_cfg.freeze()
        # Validation numbers its classes as training does (a mismatch stops here).
        dataset = build_dataset(split_cfg, split,
                                classes=train_classes if split == "val" else ())
        if split == "train":
            train_classes = named_classes(getattr(dataset, "classes", []))
            items = _items(dataset)
            train_items = set(items)
            _check_one_label_each(dataset, items)
        elif split == "val" and train_items:
            _check_held_out(dataset, train_items)
        _check_videos_found(cfg, split, dataset, dataset_kwargs(cfg, split)["data_path"])
        if split == "train":
            check_batch_size(cfg, len(dataset), processes)
            check_shared_memory(cfg, spec.local_procs if spec.distributed else 1)
        _check_decoding(split, dataset)
        logger.info("data check: %s list has %d videos", split, len(dataset))
