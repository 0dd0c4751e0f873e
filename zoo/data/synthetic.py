"""The embedded default dataset: short H.264 videos whose class is the direction a shape moves in.

Class ``k`` is the ``k``-th of: right, left, up, down, up-right, down-left, up-left, down-right
(opposites are adjacent, so any number of classes from 2 to 8 keeps pairs that mirror each other).
Only motion tells the classes apart:

* The target's position at the middle frame is drawn from the same box for every class and its path
  is symmetric about it, so the middle frame, and the position averaged over time, carry no
  direction information; a clip played backwards looks like the opposite class, so a model that
  ignores frame order cannot beat chance between the two classes of a pair (<= 50% overall).
  (The first frame alone does hint at the direction: a rightward target starts left of centre.)
* Size, speed, shape (square or disk) and colours are drawn independently of the class.
* 1-3 distractor shapes sit still or jitter in place with no net motion.
* The target stays fully inside the frame for the whole video.

Videos (drawn and encoded by :mod:`zoo.data.motion`: libx264, yuv420p, one keyframe every 16
frames, no B-frames) are written beside ``train.txt`` / ``val.txt`` in the gluoncv list format and
``classes.txt``. Each video's random
numbers come from ``(seed, split, label, index)`` alone, so a seed always gives the same dataset.

Command line::

    python -m zoo.data.synthetic --out DIR [--num-classes 4 --train-per-class 60 ...]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import multiprocessing
import os
import shutil
import signal
import sys
import tempfile
import time
from typing import Any, Dict, List, Tuple

from yacs.config import CfgNode

from ..config import ConfigError
from ..utils.env import available_cpus
from ..utils.logger import log_once

# The videos themselves (re-exported: users and tests reach them as zoo.data.synthetic.*).
from .motion import _SPLITS, DIRECTIONS, FPS, VideoSpec, render, video_spec, write_video

__all__ = [
    "DIRECTIONS", "FPS", "VideoSpec", "default_root", "generate", "prepare_synthetic", "render",
    "video_spec", "write_video",
]

logger = logging.getLogger(__name__)

# Bump when the generator's output changes, so cached datasets from an older version are not reused.
GENERATOR_VERSION = 1
MANIFEST = "dataset.json"


def _settings(
    num_classes: int,
    train_per_class: int,
    val_per_class: int,
    num_frames: int,
    size: int,
    seed: int,
) -> Dict[str, int]:
    return {
        "version": GENERATOR_VERSION,
        "num_classes": int(num_classes),
        "train_per_class": int(train_per_class),
        "val_per_class": int(val_per_class),
        "num_frames": int(num_frames),
        "size": int(size),
        "seed": int(seed),
    }


def _read_manifest(out_dir: str) -> Dict[str, Any]:
    try:
        with open(os.path.join(out_dir, MANIFEST), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def _result(out_dir: str, manifest: Dict[str, Any], seconds: float, cached: bool) -> Dict[str, Any]:
    return {
        "root": out_dir,
        "train_list": os.path.join(out_dir, "train.txt"),
        "val_list": os.path.join(out_dir, "val.txt"),
        "classes": manifest["classes"],
        "num_train": manifest["num_train"],
        "num_val": manifest["num_val"],
        "settings": manifest["settings"],
        "seconds": seconds,
        "cached": cached,
    }


_Job = Tuple[str, int, str, int, int, int, int]  # path, seed, split, label, index, frames, size


def _write_one(job: _Job) -> None:
    """Render and encode one video; ``job`` = (path, seed, split, label, index, frames, size)."""
    path, seed, split, label, index, num_frames, size = job
    write_video(path, render(video_spec(seed, split, label, index, num_frames, size)))


def _write_many(jobs: List[_Job]) -> None:
    for job in jobs:
        _write_one(job)


# Seconds in which no process finishing a batch of videos means a worker is stuck or was killed (a
# pool never learns that a worker died, and would wait for its batch forever); a batch takes well
# under a second on one core.
STALL_SECONDS = 120.0
_BATCH = 16


def _write_batch(numbered: Tuple[int, List[_Job]]) -> int:
    """Write one numbered batch of videos; its number."""
    index, batch = numbered
    _write_many(batch)
    return index


def _end_on_stop_signals() -> None:
    """Pool initializer: SIGTERM and SIGUSR1 end a worker again (their default action). The
    handlers a launcher installs for preemption come through fork, and run only when the
    worker's main thread wakes: one asleep on the pool's queue (or delivered the signal on
    another of its threads) would outlive :meth:`multiprocessing.pool.Pool.terminate`, and the
    pool's join would wait for it forever."""
    for sig in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(sig, signal.SIG_DFL)


def _write_in_processes(jobs: List[_Job], processes: int) -> None:
    """Write ``jobs`` in ``processes`` forked processes, batch by batch. If none finishes a batch
    for :data:`STALL_SECONDS`, the workers are stopped and the unfinished batches are written in
    this process: every file depends on its job alone, so the dataset is the same either way."""
    batches = [jobs[i:i + _BATCH] for i in range(0, len(jobs), _BATCH)]
    left = set(range(len(batches)))
    pool = multiprocessing.get_context("fork").Pool(processes, _end_on_stop_signals)
    try:
        finished = pool.imap_unordered(_write_batch, enumerate(batches))
        while left:  # a worker's exception is raised by next()
            left.discard(finished.next(timeout=STALL_SECONDS))
    except multiprocessing.TimeoutError:
        pass  # the batches still in `left` are written below
    finally:
        if left:  # stalled, or a worker failed: stop the workers where they are
            pool.terminate()
        else:  # all written: the workers leave their loop at the pool's end-of-work marker
            pool.close()
        pool.join()
    if left:
        rest = [job for i in sorted(left) for job in batches[i]]
        logger.warning(
            "synthetic dataset: no encoding process finished a batch of videos in %.0f s (one is "
            "stuck or was killed); writing the %d videos left in this process",
            STALL_SECONDS, len(rest))
        _write_many(rest)


def _pool_size(workers: int, num_videos: int) -> int:
    """Processes to encode with: ``workers``, or (0) one per usable core; 1 for a few videos."""
    if workers <= 0:
        workers = available_cpus()
    # fork is cheap and needs no re-import; elsewhere a serial run is simpler than spawning.
    # A daemonic process (a DataLoader worker, say) may not start children.
    if not sys.platform.startswith("linux") or multiprocessing.current_process().daemon:
        return 1
    return max(1, min(workers, num_videos // 32))


def _write_dataset(tmp: str, settings: Dict[str, int], workers: int = 0) -> Dict[str, Any]:
    num_classes, num_frames = settings["num_classes"], settings["num_frames"]
    size, seed = settings["size"], settings["seed"]
    classes = [name for name, _ in DIRECTIONS[:num_classes]]
    counts = {"train": settings["train_per_class"], "val": settings["val_per_class"]}
    jobs = []
    for split in _SPLITS:
        lines = []
        for label, name in enumerate(classes):
            os.makedirs(os.path.join(tmp, "videos", split, name))
            for i in range(counts[split]):
                rel = f"videos/{split}/{name}/{i:04d}.mp4"
                jobs.append((os.path.join(tmp, rel), seed, split, label, i, num_frames, size))
                lines.append(f"{rel} {num_frames} {label}\n")
        with open(os.path.join(tmp, f"{split}.txt"), "w", encoding="utf-8") as f:
            f.writelines(lines)
    # Every video depends on its own (seed, split, label, index) only and the encoder runs one
    # thread, so the files are the same byte for byte whatever the number of processes.
    processes = _pool_size(workers, len(jobs))
    if processes == 1:
        _write_many(jobs)
    else:
        _write_in_processes(jobs, processes)
    with open(os.path.join(tmp, "classes.txt"), "w", encoding="utf-8") as f:
        f.writelines(f"{name}\n" for name in classes)
    manifest = {
        "settings": settings,
        "classes": classes,
        "num_train": counts["train"] * num_classes,
        "num_val": counts["val"] * num_classes,
    }
    # The manifest is written last: a folder without it was never finished.
    with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=1, sort_keys=True)
    return manifest


def generate(
    out_dir: str,
    num_classes: int = 4,
    train_per_class: int = 60,
    val_per_class: int = 25,
    num_frames: int = 32,
    size: int = 64,
    seed: int = 0,
    workers: int = 0,
) -> Dict[str, Any]:
    """Write the motion dataset to ``out_dir`` unless a finished one with these settings is there.

    The videos are written to a temporary sibling folder that is renamed to ``out_dir`` at the end,
    so an interrupted run never leaves a folder that looks complete, and two processes racing to
    create the same folder both end up using whichever finished first. ``workers`` processes
    (0: one per usable core) render and encode the videos; the files do not depend on it.

    Returns:
        ``root``, ``train_list``, ``val_list``, ``classes``, ``num_train``, ``num_val``,
        ``settings``, ``seconds`` (time spent) and ``cached`` (True if nothing was written).

    Raises:
        ValueError: A setting is out of range, or ``out_dir`` holds something else.
    """
    if not 2 <= num_classes <= len(DIRECTIONS):
        raise ValueError(f"num_classes must be 2..{len(DIRECTIONS)}, got {num_classes}")
    if size < 16 or size % 2:
        raise ValueError(f"size must be an even number >= 16 (H.264 needs even sizes), got {size}")
    if min(train_per_class, val_per_class, num_frames) < 1:
        raise ValueError("train_per_class, val_per_class and num_frames must be >= 1")
    settings = _settings(num_classes, train_per_class, val_per_class, num_frames, size, seed)
    start = time.perf_counter()
    out_dir = os.path.abspath(out_dir)
    manifest = _read_manifest(out_dir)
    if manifest.get("settings") == settings:
        return _result(out_dir, manifest, time.perf_counter() - start, cached=True)
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise ValueError(
            f"{out_dir} already exists and is not a motion dataset with these settings: "
            "remove it or choose another folder"
        )
    parent, name = os.path.split(out_dir)
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}.tmp-", dir=parent)
    try:
        manifest = _write_dataset(tmp, settings, workers)
        try:
            os.rename(tmp, out_dir)  # atomic; replaces only a missing or empty folder
        except OSError:
            if _read_manifest(out_dir).get("settings") != settings:
                raise
            # Another process finished the same dataset first: use theirs.
            shutil.rmtree(tmp, ignore_errors=True)
            return _result(out_dir, manifest, time.perf_counter() - start, cached=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return _result(out_dir, manifest, time.perf_counter() - start, cached=False)


def default_root() -> str:
    """The cache folder used when ``CONFIG.DATA.SYNTHETIC.ROOT`` is empty."""
    return os.environ.get("ZOO_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "zoo")


def prepare_synthetic(cfg: CfgNode) -> CfgNode:
    """Point the config at the generated dataset, generating it first if needed.

    With ``CONFIG.DATA.SYNTHETIC.ENABLE`` False, ``cfg`` is returned unchanged. Otherwise the
    dataset lives in ``ROOT (or $ZOO_CACHE, or ~/.cache/zoo)/motion_<hash of the settings>`` and a
    frozen clone of ``cfg`` is returned with ``CONFIG.DATA.{TRAIN,VAL}_{ANNO,DATA}_PATH`` set to it.
    Safe to call from several processes at once (each may generate; the first to finish wins), but
    cheapest when called once before worker processes start.

    Raises:
        ConfigError: ``CONFIG.DATA.NUM_CLASSES`` is not 2..8.
    """
    syn = cfg.CONFIG.DATA.SYNTHETIC
    if not syn.ENABLE:
        return cfg
    num_classes = cfg.CONFIG.DATA.NUM_CLASSES
    if not 2 <= num_classes <= len(DIRECTIONS):
        raise ConfigError(
            f"CONFIG.DATA.NUM_CLASSES = {num_classes} is not allowed with CONFIG.DATA.SYNTHETIC."
            f"ENABLE True: the motion dataset has 2 to {len(DIRECTIONS)} classes"
        )
    settings = _settings(
        num_classes, syn.TRAIN_PER_CLASS, syn.VAL_PER_CLASS, syn.NUM_FRAMES, syn.SIZE, syn.SEED
    )
    digest = hashlib.sha1(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:10]
    out_dir = os.path.join(syn.ROOT or default_root(), f"motion_{digest}")
    info = generate(out_dir, **{k: v for k, v in settings.items() if k != "version"})
    if not info["cached"]:
        logger.info("generated the motion dataset in %s (%.1f s)", out_dir, info["seconds"])
    if cfg.CONFIG.DATA.RANDOM_FLIP:
        log_once(
            logger, logging.WARNING,
            "CONFIG.DATA.RANDOM_FLIP is True but the synthetic labels are motion directions: a "
            "flip turns 'left' into 'right'. Set CONFIG.DATA.RANDOM_FLIP False."
        )
    new = cfg.clone()
    new.defrost()
    new.CONFIG.DATA.TRAIN_ANNO_PATH = info["train_list"]
    new.CONFIG.DATA.VAL_ANNO_PATH = info["val_list"]
    new.CONFIG.DATA.TRAIN_DATA_PATH = out_dir
    new.CONFIG.DATA.VAL_DATA_PATH = out_dir
    new.freeze()
    return new


def main(argv: List[str] = None) -> None:
    parser = argparse.ArgumentParser(description="Write the synthetic motion-direction dataset.")
    parser.add_argument("--out", required=True, help="folder to create")
    parser.add_argument("--num-classes", type=int, default=4, help="2..8 motion directions")
    parser.add_argument("--train-per-class", type=int, default=60)
    parser.add_argument("--val-per-class", type=int, default=25)
    parser.add_argument("--frames", type=int, default=32, help="frames per video")
    parser.add_argument("--size", type=int, default=64, help="frame height = width, even")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workers", type=int, default=0,
                        help="processes that encode videos (0 = one per usable core)")
    args = parser.parse_args(argv)
    try:
        info = generate(
            args.out,
            num_classes=args.num_classes,
            train_per_class=args.train_per_class,
            val_per_class=args.val_per_class,
            num_frames=args.frames,
            size=args.size,
            seed=args.seed,
            workers=args.workers,
        )
    except ValueError as e:
        parser.exit(2, f"error: {e}\n")
    done = "already there, nothing written" if info["cached"] else "wrote"
    print(
        f"{done}: {info['num_train']} train + {info['num_val']} val videos, "
        f"{len(info['classes'])} classes ({', '.join(info['classes'])}) in {info['root']} "
        f"[{info['seconds']:.1f} s]"
    )
    print(f"lists: {info['train_list']} {info['val_list']}")


if __name__ == "__main__":
    main()
