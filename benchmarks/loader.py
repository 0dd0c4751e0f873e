"""Loader throughput: clips/s that ``build_loader`` delivers for a config (``tools/benchmark.py
data``): decode, sample, transform, collate and worker processes, for each ``DATA.NUM_WORKERS``
and each ``DATA.CLIPS_PER_VIDEO`` value.

Settings are measured in alternating order (A B, then B A, ...) over ``rounds`` rounds, so that a
change in the machine's load during the run falls on all of them alike; every round is one row.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any, Dict, List, Sequence


def _cpu_seconds(loader) -> float:
    """CPU seconds used so far by this process and the loader's worker processes (all their
    threads: FFmpeg's included), from /proc; this process's alone where /proc is missing."""
    total = time.process_time()
    iterator = getattr(loader, "_iterator", None)
    for worker in getattr(iterator, "_workers", None) or []:
        try:
            with open(f"/proc/{worker.pid}/stat", encoding="ascii") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError, AttributeError):
            continue
    return total


def _time_loader(cfg, split: str, batches: int, warmup: int) -> Dict[str, Any]:
    """Clips/s of one loader built from ``cfg`` over ``batches`` batches after ``warmup``, and
    clips per CPU second (the loader's processes together: a figure per fully used core, which
    other jobs on a shared machine change less than the clips/s)."""
    from zoo.data import build_loader

    loader = build_loader(cfg, split)
    clips, bad, start, seen, epoch, cpu = 0, 0, None, 0, 0, 0.0
    while seen < warmup + batches:
        if hasattr(loader.sampler, "set_epoch"):
            loader.sampler.set_epoch(epoch)
        for batch in loader:
            if seen == warmup:
                start, cpu = time.perf_counter(), _cpu_seconds(loader)
            if seen >= warmup:
                clips += int(batch[0].shape[0])
                bad += int(batch[3].sum())
            seen += 1
            if seen >= warmup + batches:
                break
        epoch += 1
    seconds = time.perf_counter() - start
    cpu = _cpu_seconds(loader) - cpu
    row = {"batch": int(batch[0].shape[0]),
           "clip_shape": "x".join(str(v) for v in batch[0].shape[1:]), "batches": batches,
           "seconds": round(seconds, 4), "clips_per_s": round(clips / seconds, 2),
           "cpu_s": round(cpu, 3), "clips_per_cpu_s": round(clips / max(cpu, 1e-9), 2),
           "skipped_videos": bad}
    del loader
    return row


def _settings(cfg, workers: Sequence[int], clips_per_video: Sequence[int],
              windows: Sequence[str], buffers: Sequence[int] = (),
              decode_threads: Sequence[int] = (), resize_on: Sequence[str] = ()) -> List[tuple]:
    """(workers, clips per video, clips window, batch buffers per worker, decode threads, resize
    on) to time; one window for 1 clip per video."""
    values = [int(v) for v in clips_per_video] or [int(cfg.CONFIG.DATA.CLIPS_PER_VIDEO)]
    windows = list(windows) or [str(cfg.CONFIG.DATA.CLIPS_WINDOW)]
    buffers = [int(b) for b in buffers] or [int(cfg.CONFIG.DATA.BATCH_BUFFERS_PER_WORKER)]
    threads = [int(t) for t in decode_threads] or [int(cfg.CONFIG.DATA.DECODE_THREADS)]
    places = list(resize_on) or [str(cfg.CONFIG.DATA.RESIZE_ON)]
    return [(int(n), v, w, b, d, r) for n in workers for b in buffers for v in values
            for w in (windows if v > 1 else windows[:1]) for d in threads for r in places]


def loader_throughput(cfg, workers: Sequence[int] = (0, 2), batches: int = 20, warmup: int = 3,
                      split: str = "train", clips_per_video: Sequence[int] = (),
                      rounds: int = 1, windows: Sequence[str] = (),
                      buffers: Sequence[int] = (),
                      decode_threads: Sequence[int] = (),
                      resize_on: Sequence[str] = ()) -> List[Dict[str, Any]]:
    """Clips/s of the ``split`` loader for each ``DATA.NUM_WORKERS`` x ``DATA.CLIPS_PER_VIDEO``.

    The first ``warmup`` batches (worker start-up, first decodes) are not timed. The loader is
    iterated again from its start when an epoch has fewer batches than needed. A batch holds
    ``TRAIN.BATCH_SIZE`` clips whatever ``CLIPS_PER_VIDEO`` is, so every setting times the same
    number of clips.

    Args:
        cfg: A loaded config (synthetic data is generated first when it is enabled).
        workers: ``DATA.NUM_WORKERS`` values to time.
        batches: Timed batches per value.
        warmup: Untimed batches per value.
        split: "train", "val" or "test".
        clips_per_video: ``DATA.CLIPS_PER_VIDEO`` values to time (empty = the config's).
        rounds: Times each setting is measured, in alternating order.
        windows: ``DATA.CLIPS_WINDOW`` values to time with more than one clip per video
            (empty = the config's).
        buffers: ``DATA.BATCH_BUFFERS_PER_WORKER`` values to time (empty = the config's).
        decode_threads: ``DATA.DECODE_THREADS`` values to time (empty = the config's; -1 is
            FFmpeg's one thread per core in every worker).
        resize_on: ``DATA.RESIZE_ON`` values to time (empty = the config's). With "device" the
            loader hands over unresized cuts: the resize is left to the training step, and is not
            in the figures.

    Returns:
        One row per setting and round (``round`` from 1).
    """
    settings = _settings(cfg, workers, clips_per_video, windows, buffers, decode_threads,
                         resize_on)
    rows = []
    for r in range(rounds):
        for n, per_video, window, kept, threads, place in (settings if r % 2 == 0
                                                           else settings[::-1]):
            c = cfg.clone()
            c.defrost()
            c.CONFIG.DATA.NUM_WORKERS = n
            c.CONFIG.DATA.CLIPS_PER_VIDEO = per_video
            c.CONFIG.DATA.CLIPS_WINDOW = window
            c.CONFIG.DATA.BATCH_BUFFERS_PER_WORKER = kept
            c.CONFIG.DATA.DECODE_THREADS = threads
            c.CONFIG.DATA.RESIZE_ON = place
            c.freeze()
            row = {"split": split, "num_workers": n, "clips_per_video": per_video,
                   "clips_window": window if per_video > 1 else "", "batch_buffers": kept,
                   "decode_threads": threads, "resize_on": place, "round": r + 1}
            row.update(_time_loader(c, split, batches, warmup))
            row["clips_per_s_per_worker"] = round(row["clips_per_s"] / max(1, n), 2)
            row["decoder"] = cfg.CONFIG.DATA.DECODER
            rows.append(row)
    return rows


def median_rows(rows: List[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Per (workers, batch buffers, clips per video, window, decode threads, resize on): the
    median clips/s over rounds (and per worker), every round's figure, and the ratio to
    CLIPS_PER_VIDEO 1 with the same workers, buffers, decode threads and resize place (when it was
    measured)."""
    groups: Dict[tuple, List[float]] = {}
    per_cpu: Dict[tuple, List[float]] = {}
    for row in rows:
        key = (row["num_workers"], row.get("batch_buffers", ""), row["clips_per_video"],
               row.get("clips_window", ""), row.get("decode_threads", ""),
               row.get("resize_on", ""))
        groups.setdefault(key, []).append(row["clips_per_s"])
        if "clips_per_cpu_s" in row:
            per_cpu.setdefault(key, []).append(row["clips_per_cpu_s"])
    out = []
    for key, figures in groups.items():
        n, kept, per_video, window, threads, place = key
        median = statistics.median(figures)
        base = next((v for k, v in groups.items()
                     if k[:3] == (n, kept, 1) and k[4:] == (threads, place)), None)
        out.append({"num_workers": n, "clips_per_video": per_video, "clips_window": window,
                    "batch_buffers": kept, "decode_threads": threads, "resize_on": place,
                    "median_clips_per_s": round(median, 2),
                    "per_worker": round(median / max(1, n), 2),
                    "clips_per_cpu_s": (round(statistics.median(per_cpu[key]), 2)
                                        if key in per_cpu else ""),
                    "rounds": " ".join(f"{f:g}" for f in figures),
                    "vs_1_clip": round(median / statistics.median(base), 2) if base else ""})
    return out
