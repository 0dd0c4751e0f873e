"""Config -> dataset -> DataLoader. The only place that reads ``CONFIG.DATA`` for the data layer.

``DATASET_REGISTRY`` holds the datasets ``CONFIG.DATA.DATASET`` can name. An entry is called as
``entry(**kwargs) -> torch.utils.data.Dataset`` with the keyword arguments built by
``dataset_kwargs``:

* ``anno_path`` (str), ``data_path`` (str; the list's video paths are relative to it), ``split``
  ("train", "val" or "test"), ``list_format`` (a name in ``zoo.data.lists.formats.LIST_FORMATS``),
  ``official_split`` (1-3): what the records provider reads
  (``zoo.data.lists.providers.ListSource``);
* the fields of ``zoo.data.clip_settings.ClipSettings``: ``clip_len``, ``frame_rate`` (stride
  between sampled frames), ``crop_size``, ``short_side_size`` (``SHORT_SIDE_SIZE``; for "test"
  ``TEST_SHORT_SIDE_SIZE`` when set), ``train_short_side_range``
  ([min, max]), ``random_flip`` (bool), ``mean`` and ``std`` (3 floats each, 0..1 scale),
  ``test_num_segment``, ``test_num_crop``, ``seed`` (int), ``sampling`` ("dense", "tsn",
  "uniform"), ``num_segment``, ``decoder`` (a name in ``zoo.data.decode.registry.DECODERS``),
  ``decode_threads``, ``decode_timeout`` (seconds, 0 = none), ``max_tries``, ``color_jitter``
  (4 floats), ``frame_template`` (frame file names of the "frames" decoder, e.g.
  ``img_{:05d}.jpg``), ``frame_size`` ([height, width], only when
  ``KEEP_ASPECT_RATIO`` is False), ``target_fps`` (frames per second the strides count in; only
  when ``TARGET_FPS`` is set), and ``clips_per_video`` and ``clips_window`` ("independent" or
  "shared"; both only for "train" when ``CLIPS_PER_VIDEO`` > 1), ``rand_augment`` (a timm
  policy string) and ``random_erase`` (a probability), each only for "train" when set, and
  ``uint8_train_clips`` (True; only for "train" with ``NORMALIZE_ON`` "device" and no
  ``RANDOM_ERASE``, and only to entries that accept it), with ``resize_on_device`` (True, when
  ``RESIZE_ON`` is "device" too; an entry that does not accept it is a ConfigError).

Every built-in entry is a records provider composed with the one ``ClipDataset``
(``zoo.data.dataset_recipes.register_dataset``); an unknown keyword is a TypeError there. A
user's own entry may be any callable that takes these keywords (one that ignores some of them
should take ``**kwargs``).

Items must begin ``(clip, label, index, n_bad)`` (training, validation and testing leave any
fields after those to the dataset's own use): ``clip`` is float ``(C, T, H, W)`` for train/val
(for train it may also be uint8 pixels, which the training step normalises on its device with
``DATA.MEAN`` / ``STD``: what ``uint8_train_clips`` asks for) and ``(V, C, T, H, W)`` with
``V = test_num_segment * test_num_crop`` for test (for train with ``clips_per_video`` N > 1, a
tuple of N ``(C, T, H, W)`` clips, which :func:`~zoo.data.collate.collate_clips` makes a batch
of clips of);
``label`` and ``index`` are ints; ``n_bad`` counts the unreadable videos skipped to produce the
item. With ``resize_on_device`` a training item's clips are unresized cuts and the item ends with
their :class:`~zoo.data.device_crops.CropGeometry`, which the batch ends with too. A dataset
should also expose ``num_classes_found`` (largest label + 1) so a too-small ``NUM_CLASSES`` is
caught early.
"""

from __future__ import annotations

import functools
import inspect
import itertools
import logging
import os
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
from torch.utils.data import (
    DataLoader,
    Dataset,
    DistributedSampler,
    Sampler,
)
from yacs.config import CfgNode

from ..config import ConfigError
from ..utils import comm
from . import dataset_recipes, source_datasets  # noqa: F401  (register the built-in datasets)
from .batch_memory import REUSE_WORKS, BatchMemory
from .collate import collate_clips, collate_train
from .lists.annotations import check_same_classes, named_classes
from .registry import DATASET_REGISTRY
from .robust import GuardedLoader
from .workers import check_worker_imports, seed_worker, worker_context, worker_threads

logger = logging.getLogger(__name__)

# Call contract: ``DATASET_REGISTRY.get(name)(**dataset_kwargs(cfg, split)) -> Dataset``
# (see the module docstring for the keyword arguments and the item format).

SPLITS = ("train", "val", "test")
_SYNTHETIC_HINT = "set it to your list or set CONFIG.DATA.SYNTHETIC.ENABLE True"
# Normalisation used when CONFIG.DATA.MEAN / STD are [] and nobody filled in the model's values.
DEFAULT_MEAN = (0.45, 0.45, 0.45)
DEFAULT_STD = (0.225, 0.225, 0.225)


def _list_paths(cfg: CfgNode, split: str) -> Dict[str, str]:
    """The annotation list and data root of ``split``, with the test -> val fallbacks applied."""
    data = cfg.CONFIG.DATA
    if split == "test" and data.TEST_ANNO_PATH:
        anno_key, anno_path = "CONFIG.DATA.TEST_ANNO_PATH", data.TEST_ANNO_PATH
        data_path = data.TEST_DATA_PATH or data.VAL_DATA_PATH
    elif split in ("val", "test"):
        # Without a test list the test split is the validation list, with its data root.
        anno_key, anno_path = "CONFIG.DATA.VAL_ANNO_PATH", data.VAL_ANNO_PATH
        data_path = data.VAL_DATA_PATH
    else:
        anno_key, anno_path = "CONFIG.DATA.TRAIN_ANNO_PATH", data.TRAIN_ANNO_PATH
        data_path = data.TRAIN_DATA_PATH
    if not anno_path:
        raise ConfigError(f"{anno_key} is empty: {_SYNTHETIC_HINT}")
    if not os.path.exists(anno_path):
        raise ConfigError(f"{anno_key} = {anno_path!r} does not exist: {_SYNTHETIC_HINT}")
    # An empty data root means the list's paths are relative to the list's own folder (or to the
    # folder itself for the folder sources).
    if not data_path:
        data_path = anno_path if os.path.isdir(anno_path) else os.path.dirname(
            os.path.abspath(anno_path))
    return {"anno_key": anno_key, "anno_path": anno_path, "data_path": data_path}


def dataset_kwargs(cfg: CfgNode, split: str) -> Dict[str, Any]:
    """Translate ``cfg`` into the typed keyword arguments of a registered dataset.

    Args:
        cfg: A loaded config (with the synthetic data already prepared when it is enabled).
        split: "train", "val" or "test".
    """
    if split not in SPLITS:
        raise ValueError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    data = cfg.CONFIG.DATA
    paths = _list_paths(cfg, split)
    kwargs = {
        "anno_path": paths["anno_path"],
        "data_path": paths["data_path"],
        "split": split,
        "clip_len": int(data.CLIP_LEN),
        "frame_rate": int(data.FRAME_RATE),
        "crop_size": int(data.CROP_SIZE),
        "short_side_size": test_short_side(cfg) if split == "test" else int(data.SHORT_SIDE_SIZE),
        "train_short_side_range": [int(v) for v in data.TRAIN_SHORT_SIDE_RANGE],
        "random_flip": bool(data.RANDOM_FLIP),
        "mean": normalization(cfg)[0],
        "std": normalization(cfg)[1],
        "test_num_segment": int(data.TEST_NUM_SEGMENT),
        "test_num_crop": int(data.TEST_NUM_CROP),
        "seed": int(cfg.CONFIG.SEED),
        "sampling": str(data.SAMPLING),
        "num_segment": int(data.NUM_SEGMENT),
        "decoder": str(data.DECODER),
        "list_format": str(data.LIST_FORMAT),
        "frame_template": str(data.FRAME_TEMPLATE),
        "decode_threads": int(data.DECODE_THREADS),
        "decode_timeout": float(data.DECODE_TIMEOUT),
        "max_tries": int(data.MAX_TRIES),
        "color_jitter": [float(v) for v in data.COLOR_JITTER],
        "official_split": int(data.OFFICIAL_SPLIT),
    }
    if not data.KEEP_ASPECT_RATIO:
        # Only when set, so datasets written before the key existed keep working.
        kwargs["frame_size"] = [int(data.NEW_HEIGHT), int(data.NEW_WIDTH)]
    if not data.DECODE_RESIZE:
        kwargs["decode_resize"] = False  # the same: only when it differs from the default
    if split == "train" and int(data.CLIPS_PER_VIDEO) > 1:
        kwargs["clips_per_video"] = int(data.CLIPS_PER_VIDEO)  # likewise
        kwargs["clips_window"] = str(data.CLIPS_WINDOW)
    if float(data.TARGET_FPS) > 0:
        kwargs["target_fps"] = float(data.TARGET_FPS)  # likewise
    if split == "train" and data.RAND_AUGMENT:
        kwargs["rand_augment"] = str(data.RAND_AUGMENT)  # likewise
    if split == "train" and float(data.RANDOM_ERASE) > 0:
        kwargs["random_erase"] = float(data.RANDOM_ERASE)  # likewise
    return kwargs


def test_short_side(cfg: CfgNode) -> int:
    """The short side of the test split's frames: ``TEST_SHORT_SIDE_SIZE``, or ``SHORT_SIDE_SIZE``
    (the validation split's) when it is 0."""
    data = cfg.CONFIG.DATA
    return int(data.TEST_SHORT_SIDE_SIZE or data.SHORT_SIDE_SIZE)


def fill_normalization(cfg: CfgNode, facts: Dict[str, Any]) -> CfgNode:
    """Fill empty ``CONFIG.DATA.MEAN`` / ``STD`` from a model's facts (its ``mean`` / ``std``).

    zoo.data never imports zoo.models: the command line (zoo.cli.configure) calls this with
    ``zoo.models.model_facts(cfg.CONFIG.MODEL.NAME)``. Values set in the config are kept.

    Returns:
        ``cfg`` itself when nothing changes, else a filled clone (frozen like ``cfg``).
    """
    data = cfg.CONFIG.DATA
    fill = {key: facts.get(key.lower()) for key in ("MEAN", "STD") if not data[key]}
    fill = {key: value for key, value in fill.items() if value}
    if not fill:
        return cfg
    new = cfg.clone()
    frozen = new.is_frozen()
    new.defrost()
    for key, value in fill.items():
        new.CONFIG.DATA[key] = [float(v) for v in value]
    if frozen:
        new.freeze()
    return new


def normalization(cfg: CfgNode) -> Tuple[List[float], List[float]]:
    """``(mean, std)`` the clips are normalised with (0..1 scale; the defaults for empty keys)."""
    data = cfg.CONFIG.DATA
    return ([float(v) for v in (data.MEAN or DEFAULT_MEAN)],
            [float(v) for v in (data.STD or DEFAULT_STD)])


def build_dataset(cfg: CfgNode, split: str, uint8_train_clips: bool = False,
                  classes: Sequence[str] = ()) -> Dataset:
    """Build ``CONFIG.DATA.DATASET`` for ``split`` ("train", "val" or "test").

    ``classes``: the training data's class names (or a checkpoint's), for a validation or test
    split. Sources whose labels are names (class folders, Kinetics CSVs) number their classes in
    that order (:class:`~zoo.data.lists.providers.ListSource`), and the dataset's class names must
    agree with them wherever both sides name an id (:func:`~zoo.data.lists.annotations.
    check_same_classes`): a validation list whose ids mean other classes stops here. Names that
    are only the ids' numbers (a training list without ``classes.txt``) are as none.

    With ``uint8_train_clips`` (what :func:`build_loader` asks, for the training step to
    normalise), ``CONFIG.DATA.NORMALIZE_ON`` "device" and ``RANDOM_ERASE`` 0, training items
    hold uint8 clips; else every clip is normalised float.

    The test split reads ``TEST_ANNO_PATH`` / ``TEST_DATA_PATH`` and falls back to the validation
    ones when they are empty. With ``CONFIG.DATA.SYNTHETIC.ENABLE`` the generated dataset is used
    (and generated first if needed).

    Raises:
        ConfigError: A list path is empty or missing, or labels exceed ``NUM_CLASSES``.
        AnnotationError: The split names a class id differently from ``classes``.
    """
    if cfg.CONFIG.DATA.SYNTHETIC.ENABLE:
        from .synthetic import prepare_synthetic  # late: see zoo/data/__init__.py

        cfg = prepare_synthetic(cfg)  # cheap when already prepared: a hash and a file check
    kwargs = dataset_kwargs(cfg, split)
    entry = DATASET_REGISTRY.get(cfg.CONFIG.DATA.DATASET)
    if (uint8_train_clips and split == "train" and cfg.CONFIG.DATA.NORMALIZE_ON == "device"
            and not float(cfg.CONFIG.DATA.RANDOM_ERASE) > 0
            and _takes(entry, "uint8_train_clips")):
        # Only to entries that accept it: a user's entry written before the key existed keeps
        # handing over float clips, which the training step takes as they are. Random erasing
        # fills its box with noise in normalised units, so its clips are normalised here.
        kwargs["uint8_train_clips"] = True
        if cfg.CONFIG.DATA.RESIZE_ON == "device":
            if not _takes(entry, "resize_on_device"):
                raise ConfigError(
                    f"CONFIG.DATA.RESIZE_ON = 'device' but CONFIG.DATA.DATASET = "
                    f"{cfg.CONFIG.DATA.DATASET!r} does not take resize_on_device (a ClipSettings "
                    "field): set RESIZE_ON loader, or build the dataset on ClipDataset"
                )
            kwargs["resize_on_device"] = True
            if comm.is_main_process():
                logger.info("train crops: cut by the loader, resized and flipped by the training "
                            "step on its device (DATA.RESIZE_ON device)")
    classes = named_classes(classes)  # numbers only (lists without classes.txt): no names
    if classes and _takes(entry, "classes", by_name=True):  # not a ClipSettings field
        kwargs["classes"] = list(classes)
    dataset = entry(**kwargs)
    key = _list_paths(cfg, split)["anno_key"]
    if classes and getattr(dataset, "classes", None) is not None:
        check_same_classes(dataset.classes, classes, f"{key} = {kwargs['anno_path']!r}")
    found = getattr(dataset, "num_classes_found", None)
    if found is not None and classes and found > len(classes):
        raise ConfigError(
            f"{key} = {kwargs['anno_path']!r} has labels up to {found - 1}, but the training "
            f"data names {len(classes)} classes (ids 0 to {len(classes) - 1}): a {split} label "
            "must be one of the training classes; leave those videos out of the list, or give "
            "the training data that class")
    if found is not None:
        check_label_count(found, cfg.CONFIG.DATA.NUM_CLASSES, f"{key} = {kwargs['anno_path']!r}")
    names = named_classes(getattr(dataset, "classes", None) or [])
    if split == "train" and names:
        check_named_count(len(names), cfg.CONFIG.DATA.NUM_CLASSES, f"{key} = "
                          f"{kwargs['anno_path']!r}")
    return dataset


def check_label_count(found: int, num_classes: int, where: str) -> None:
    """Stop when a list's labels (``found`` = the largest + 1) exceed ``NUM_CLASSES`` (0 =
    counted from the list: never).

    Raises:
        ConfigError: One line naming the list (``where``) and the count to set.
    """
    if 0 < num_classes < found:
        raise ConfigError(f"{where} has labels up to {found - 1} but CONFIG.DATA.NUM_CLASSES = "
                          f"{num_classes}: raise NUM_CLASSES to at least {found}")


def check_named_count(named: int, num_classes: int, where: str) -> None:
    """Stop when ``NUM_CLASSES`` is more than the training data names (``classes.txt``, class
    folders, a Kinetics CSV's names): the extra outputs are classes no clip shows, and top-k
    accuracy over them means little (0 = counted: never).

    Raises:
        ConfigError: One line naming the list (``where``) and the count to set.
    """
    if num_classes > named:
        raise ConfigError(f"{where} names {named} classes but CONFIG.DATA.NUM_CLASSES = "
                          f"{num_classes}: set NUM_CLASSES {named} (or 0 to count them)")


def count_train_classes(cfg: CfgNode) -> int:
    """Classes of the training split as ``CONFIG.DATA.DATASET`` reads it: the largest label + 1,
    or the number of class names it has when that is more (``classes.txt``, UCF101's
    ``classInd.txt``, a Kinetics CSV's names). A registered recipe's provider reads only the
    list; an entry of the dataset API before providers is built."""
    entry = DATASET_REGISTRY.get(cfg.CONFIG.DATA.DATASET)
    if isinstance(entry, dataset_recipes.DatasetRecipe):
        videos = entry.read(**dataset_kwargs(cfg, "train"))
        labels, names = [r.label for r in videos.records], videos.classes
    else:
        dataset = build_dataset(cfg, "train")
        labels = [(getattr(dataset, "num_classes_found", None) or 0) - 1]
        names = getattr(dataset, "classes", None) or []
    return max(max(labels, default=-1) + 1, len(names))


def _takes(entry: Any, keyword: str, by_name: bool = False) -> bool:
    """Whether the registry entry ``entry`` accepts ``keyword``: by name, or (unless
    ``by_name``) as ``**kwargs``, where a ClipDataset subclass's settings go."""
    if isinstance(entry, dataset_recipes.DatasetRecipe):
        return True
    try:
        params = inspect.signature(entry).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == keyword or (p.kind is p.VAR_KEYWORD and not by_name) for p in params)


class EpochSampler(Sampler):
    """Wraps a sampler that has ``set_epoch`` and yields ``(epoch, index)`` pairs, so a dataset
    can derive each item's augmentation from (seed, epoch, index) - also inside persistent data
    workers, which never see ``set_epoch`` calls made in the main process.

    ``set_epoch(epoch, skip)`` makes the next pass over the epoch leave out its first ``skip``
    indices: a run resumed mid-epoch continues with exactly the batches it had not trained, and
    the skipped videos are never decoded (only their indices are drawn).

    ``set_epochs(first, end, skip, take)`` makes the next pass serve epochs ``first .. end - 1``
    back to back instead (see :mod:`zoo.data.epoch_stream`): each epoch in the order
    ``set_epoch`` gives it, cut at ``take(epoch)`` indices, ``first`` without its first ``skip``.
    One iterator over a loader then spans the epochs, so its workers make the next epoch's
    first batches while the current one ends.
    """

    def __init__(self, sampler: DistributedSampler) -> None:
        self.sampler = sampler
        self.epoch = 0
        self.skip = 0
        self.span: Optional[Tuple[int, int, int, Callable[[int], int]]] = None

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        self.epoch = epoch
        self.skip = skip
        self.span = None
        self.sampler.set_epoch(epoch)

    def set_epochs(self, first: int, end: int, skip: int, take: Callable[[int], int]) -> None:
        self.span = (first, end, skip, take)

    def __iter__(self):
        # A skip or a span applies to one pass only (precise BN re-reads the epoch from its start;
        # the DataLoader's BatchSampler makes this iterator when its first batch is asked for).
        if self.span is not None:
            span, self.span = self.span, None
            return self._spanning(*span)
        epoch, skip, self.skip = self.epoch, self.skip, 0
        return ((epoch, i) for i in itertools.islice(self.sampler, skip, None))

    def _spanning(self, first: int, end: int, skip: int, take: Callable[[int], int]):
        for epoch in range(first, end):
            self.epoch = epoch
            self.sampler.set_epoch(epoch)  # read by the sampler's iter() just below
            start = skip if epoch == first else 0
            yield from ((epoch, i) for i in itertools.islice(self.sampler, start, take(epoch)))

    def __len__(self) -> int:
        return len(self.sampler)


def _videos_per_batch(batch_size: int, clips_per_video: int, per_rank: int,
                      world_size: int) -> int:
    """Videos in a training batch of ``batch_size`` clips; raises ConfigError when no full batch
    exists."""
    if batch_size % clips_per_video:
        raise ConfigError(
            f"CONFIG.TRAIN.BATCH_SIZE = {batch_size} is not a multiple of "
            f"CONFIG.DATA.CLIPS_PER_VIDEO = {clips_per_video}: make it one"
        )
    videos = batch_size // clips_per_video
    if per_rank < videos:
        what = f"{per_rank} training videos" if clips_per_video == 1 else (
            f"{per_rank * clips_per_video} training clips ({per_rank} videos x "
            f"CONFIG.DATA.CLIPS_PER_VIDEO {clips_per_video})")
        raise ConfigError(
            f"CONFIG.TRAIN.BATCH_SIZE = {batch_size} is larger than the {what} each of the "
            f"{world_size} process(es) gets, so no full batch exists: lower it"
        )
    return videos


def _sampler(dataset, train: bool, seed: int):
    """Training: an :class:`EpochSampler` (the order of epoch e is a function of (SEED, e) even
    with one process, so a resumed run replays exactly the epochs it missed). Evaluation: the
    videos in order, sharded when there are several ranks; None for one rank."""
    world_size, rank = comm.get_world_size(), comm.get_rank()
    if train:
        return EpochSampler(DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=seed, drop_last=False
        ))
    if world_size > 1:
        return DistributedSampler(
            dataset, num_replicas=world_size, rank=rank, shuffle=False, seed=seed, drop_last=False
        )
    return None


def _multigrid_batches(cfg: CfgNode, sampler: EpochSampler, clips_per_video: int):
    """The batch sampler of a multigrid run (``CONFIG.TRAIN.MULTIGRID``, zoo/data/multigrid.py)."""
    from ..solver.multigrid import MultigridPlan
    from .multigrid import MultigridBatchSampler

    if clips_per_video > 1:
        raise ConfigError(
            f"CONFIG.TRAIN.MULTIGRID = {cfg.CONFIG.TRAIN.MULTIGRID!r} trains one clip per video: "
            f"set CONFIG.DATA.CLIPS_PER_VIDEO 1 (it is {clips_per_video}) or MULTIGRID \"\"")
    plan = MultigridPlan(cfg)
    batches = MultigridBatchSampler(sampler, plan, list(cfg.CONFIG.DATA.TRAIN_SHORT_SIDE_RANGE))
    batches.check(plan.epochs)
    return batches


def build_loader(cfg: CfgNode, split: str, signal_grace: float = 0.0,
                 classes: Sequence[str] = ()) -> DataLoader:
    """A DataLoader for ``split``, sharded over ranks when a process group has several ranks.

    ``signal_grace`` > 0: a SIGTERM / SIGUSR1 that reaches the loader's worker processes does not
    end them at once; they keep serving batches for that many seconds (+5) so that the process
    reading them can finish what it does on such a signal (the trainer passes
    ``CONFIG.TRAIN.PREEMPT_GRACE``).

    ``classes``: the training data's class names, for a validation or test loader (see
    :func:`build_dataset`).

    ``CONFIG.TRAIN.BATCH_SIZE`` counts clips: with ``CONFIG.DATA.CLIPS_PER_VIDEO`` N > 1 a
    training batch holds ``BATCH_SIZE / N`` videos of N clips each
    (:func:`~zoo.data.collate.collate_clips`), and the epoch, one pass over the videos, has N x
    as many batches as with N = 1.

    With ``CONFIG.DATA.NORMALIZE_ON`` "device" (the default) training batches are uint8 pixels,
    ``(B, C, T, H, W)`` stored in ``(B, T, H, W, C)`` order, that the training step normalises on
    its device (:meth:`zoo.train.step.TrainStep.prepare`); validation and test batches are float.

    Training shuffles and drops the last partial batch; validation and testing keep every video
    in order (a DistributedSampler pads them by repeating a few videos, which the evaluator
    de-duplicates by index). Call ``loader.sampler.set_epoch(epoch)`` when the sampler has it.
    With ``CONFIG.TRAIN.MULTIGRID`` the training loader's ``batch_sampler`` is a
    :class:`~zoo.data.multigrid.MultigridBatchSampler` (its ``set_epoch(epoch, skip_batches)``
    replaces the sampler's; batches differ in size and clip shape, and epochs in length).

    The loader is a :class:`~zoo.data.robust.GuardedLoader`: iterating it raises
    :class:`~zoo.data.robust.TooManyBadVideos` (naming examples) when more than
    ``CONFIG.DATA.MAX_BAD_FRACTION`` of an epoch's videos on this rank could not be read.
    """
    dataset = build_dataset(cfg, split, uint8_train_clips=True, classes=classes)
    train = split == "train"
    batch_size = {
        "train": cfg.CONFIG.TRAIN.BATCH_SIZE,
        "val": cfg.CONFIG.VAL.BATCH_SIZE,
        "test": cfg.CONFIG.TEST.BATCH_SIZE,
    }[split]
    world_size, rank = comm.get_world_size(), comm.get_rank()
    seed = int(cfg.CONFIG.SEED)
    sampler = _sampler(dataset, train, seed)
    per_rank = len(sampler) if sampler is not None else len(dataset)
    clips_per_video = int(cfg.CONFIG.DATA.CLIPS_PER_VIDEO) if train else 1
    videos_per_batch = (_videos_per_batch(batch_size, clips_per_video, per_rank, world_size)
                        if train else batch_size)
    data = cfg.CONFIG.DATA
    num_workers = int(data.NUM_WORKERS)
    decoder_threads = None
    check_worker_imports(dataset, data.WORKER_START_METHOD, num_workers)
    if num_workers:
        threads = worker_threads(int(data.DECODE_THREADS), num_workers)
        if isinstance(threads["decoder"], int):
            decoder_threads = threads["decoder"]
        if comm.is_main_process():
            logger.info("%s loader: %d workers on %d cores, each with %s decoder thread(s) "
                        "(DATA.DECODE_THREADS %d), %d torch and %s OpenCV thread(s)", split,
                        num_workers, threads["cores"], threads["decoder"],
                        int(data.DECODE_THREADS), threads["torch"], threads["opencv"])
    # (Kept buffers need torch 2.10+: see zoo/data/batch_memory.py.)
    buffers = int(data.BATCH_BUFFERS_PER_WORKER) if REUSE_WORKS else 0
    memory = BatchMemory(num_workers, buffers) if train and num_workers and buffers else None
    if train and hasattr(dataset, "write_batches"):
        dataset.write_batches(memory)  # clips go straight into the batch (see ClipDataset)
    batching: Dict[str, Any] = {"batch_size": videos_per_batch, "sampler": sampler,
                                "drop_last": train}
    if train and cfg.CONFIG.TRAIN.MULTIGRID:
        batching = {"batch_sampler": _multigrid_batches(cfg, sampler, clips_per_video)}
    return GuardedLoader(
        dataset,
        max_bad_fraction=float(data.MAX_BAD_FRACTION),
        split=split,
        clips_per_item=clips_per_video,
        **batching,
        collate_fn=(functools.partial(collate_clips, clips_per_video=clips_per_video,
                                      memory=memory) if clips_per_video > 1
                    else functools.partial(collate_train, memory=memory) if train else None),
        num_workers=num_workers,
        multiprocessing_context=worker_context(data.WORKER_START_METHOD) if num_workers else None,
        persistent_workers=num_workers > 0,
        worker_init_fn=functools.partial(
            seed_worker, base_seed=seed + rank * 1000,
            signal_grace=float(signal_grace), decoder_threads=decoder_threads),
        pin_memory=torch.cuda.is_available(),
        # A worker stuck inside C code (which no signal interrupts) becomes an error, not a hang.
        timeout=float(data.LOADER_TIMEOUT) if num_workers > 0 else 0,
        # Each new iterator draws a seed for its workers: from this generator, not torch's global
        # one, which the model's own randomness (dropout) uses and a checkpoint restores; so a
        # resumed run (which starts its iterators at other moments) replays the same stream.
        generator=torch.Generator().manual_seed(seed + rank),
    )
