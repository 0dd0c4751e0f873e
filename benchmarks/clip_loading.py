"""End-to-end clip loading (``tools/benchmark_data.py --end-to-end``): training clips as zoo's
training loader hands them over by default (decoded, resized, cropped, flipped, uint8: with
``DATA.NORMALIZE_ON device`` the normalisation runs in the training step, on the device), per
reader, one worker and one torch thread, against torchcodec and decord each followed by
torchvision's v2 resize, crop and flip on the same clips, also ending at uint8.

Paths (each in fresh processes, the paths taking turns, the order reversed every other round):

* ``zoo``: zoo's defaults, a ``VideoListDataset`` item (``DATA.DECODER auto``, ``DECODE_THREADS``
  0, ``DECODE_RESIZE`` True: frames scaled while converted, unneeded non-reference frames skipped).
* ``zoo-1thread``: the same with ``DATA.DECODE_THREADS 1`` (no FFmpeg threads).
* ``zoo-full``: the same with ``DATA.DECODE_RESIZE False`` (full-size frames, then the transform).
* ``torchcodec``: ``VideoDecoder(seek_mode="exact", num_ffmpeg_threads=1).get_frames_at``, then
  ``torchvision.transforms.v2.functional``: ``resize`` (short side, antialiased), ``crop``,
  ``horizontal_flip``.
* ``decord``: ``VideoReader(num_threads=1).get_batch``, then the same torchvision steps.

Every path reads the same items ``(epoch, index)`` and draws each clip's window, short side, crop
and flip from the dataset's per-item generator in the dataset's order, so all read the same
windows of the same videos.

Sets (:data:`SETS`, generated here): ``kinetics`` (340x256 10-s H.264, x264 CRF 23 default
settings, GOP 250, ~640 KB), ``1080p-h264`` and ``1080p-hevc`` (30-s 1920x1080 30-fps phone-like
clips, a keyframe a second, x264 / x265 ``ultrafast`` to keep generation short: 6 s encoded,
repeated five times).
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from typing import Any

from . import data as bench

PATHS = ["zoo", "zoo-1thread", "zoo-full", "torchcodec", "decord"]
PEERS = ("torchcodec", "decord")
# zoo's config overrides per zoo path.
_ZOO_OVERRIDES = {"zoo": [], "zoo-1thread": ["CONFIG.DATA.DECODE_THREADS", 1],
                  "zoo-full": ["CONFIG.DATA.DECODE_RESIZE", False]}
# write_video() arguments per set; "copies": encoded once, muxed that many times in a row.
SETS: dict[str, dict[str, Any]] = {
    "kinetics": {"seconds": 10, "height": 256, "width": 340, "fps": 25, "gop": 250,
                 "codec": "libx264", "preset": "medium", "fresh": 0.04, "copies": 1},
    "1080p-h264": {"seconds": 6, "height": 1080, "width": 1920, "fps": 30, "gop": 30,
                   "codec": "libx264", "preset": "ultrafast", "fresh": 0.0, "copies": 5},
    "1080p-hevc": {"seconds": 6, "height": 1080, "width": 1920, "fps": 30, "gop": 30,
                   "codec": "libx265", "preset": "ultrafast", "fresh": 0.0, "copies": 5},
}
# The target ratio of zoo's defaults against the best peer, per set (the benchmark's pass bar).
BARS = {"kinetics": 1.0, "1080p-h264": 1.5, "1080p-hevc": 1.5}


def generate_set(folder: str, name: str, count: int) -> str:
    """``count`` videos of set ``name`` in ``folder`` (kept when there) and their gluoncv list."""
    spec = dict(SETS[name])
    copies = spec.pop("copies")
    os.makedirs(folder, exist_ok=True)
    lines = []
    for i in range(count):
        path = os.path.join(folder, f"{name}_{i:02d}.mp4")
        if not os.path.isfile(path):
            if copies > 1:
                bench.write_video(path + ".part.mp4", seed=i, **spec)
                bench.repeat_video(path + ".part.mp4", path, copies)
            else:
                bench.write_video(path, seed=i, **spec)
        frames = int(spec["seconds"] * spec["fps"] * copies)
        lines.append(f"{os.path.basename(path)} {frames} 0\n")
    list_path = os.path.join(folder, f"{name}.txt")
    with open(list_path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return list_path


def _dataset(list_path: str, root: str, overrides: Sequence[Any] = ()):
    """The training dataset zoo's default config builds for the list."""
    from zoo.config import get_cfg
    from zoo.data.build import build_dataset

    cfg = get_cfg()
    cfg.merge_from_list(["CONFIG.DATA.TRAIN_ANNO_PATH", list_path,
                         "CONFIG.DATA.TRAIN_DATA_PATH", root, *overrides])
    # uint8 clips, as build_loader asks for its training batches (NORMALIZE_ON "device").
    return build_dataset(cfg, "train", uint8_train_clips=True)


def _open_peer(name: str, path: str):
    """``(frame count, get(indices) -> uint8 (T, C, H, W) tensor)`` of a peer's reader."""
    import torch

    if name == "torchcodec":
        from torchcodec.decoders import VideoDecoder

        decoder = VideoDecoder(path, seek_mode="exact", num_ffmpeg_threads=1,
                               dimension_order="NCHW")
        return decoder.metadata.num_frames, lambda idx: decoder.get_frames_at(idx).data
    import decord

    reader = decord.VideoReader(path, ctx=decord.cpu(0), num_threads=1)
    return len(reader), lambda idx: torch.from_numpy(
        reader.get_batch(idx).asnumpy()).permute(0, 3, 1, 2)


def peer_clip(dataset, name: str, epoch: int, index: int):
    """One training clip read by peer ``name`` + torchvision v2, drawn as ``dataset`` draws it.

    Returns:
        uint8 ``(C, T, crop, crop)``, as the dataset's training items (a view, as theirs).
    """
    import torch
    from torchvision.transforms.v2 import functional as tvf

    from zoo.data import sampling

    s = dataset.settings
    generator = dataset._item_generator(epoch, index)
    num_frames, get = _open_peer(name, dataset.paths[index])
    indices = sampling.clip_indices(num_frames, s.clip_len, s.frame_rate, s.sampling,
                                    s.num_segment, train=True, generator=generator)
    clip = get(indices.tolist())
    low, high = s.train_short_side_range
    short_side = int(torch.randint(low, high + 1, (1,), generator=generator))
    clip = tvf.resize(clip, [short_side], antialias=True)
    height, width = clip.shape[-2:]
    top = int(torch.randint(0, height - s.crop_size + 1, (1,), generator=generator))
    left = int(torch.randint(0, width - s.crop_size + 1, (1,), generator=generator))
    clip = tvf.crop(clip, top, left, s.crop_size, s.crop_size)
    if s.random_flip and bool(torch.rand(1, generator=generator) < 0.5):
        clip = tvf.horizontal_flip(clip)
    return clip.transpose(0, 1)


def _worker(path_name: str, list_path: str, root: str, clips: int) -> dict[str, Any]:
    """Read ``clips`` training clips with ``path_name`` in this process; its clips/s."""
    import torch

    torch.set_num_threads(1)
    peer = path_name in PEERS
    dataset = _dataset(list_path, root, [] if peer else _ZOO_OVERRIDES[path_name])

    def load(epoch: int, index: int):
        return peer_clip(dataset, path_name, epoch, index) if peer else dataset[(epoch, index)][0]

    shape = tuple(load(1000, 0).shape)  # warm-up: imports, first open
    start = time.perf_counter()
    for k in range(clips):
        load(k // len(dataset), k % len(dataset))
    elapsed = time.perf_counter() - start
    return {"path": path_name, "clips": clips, "seconds": elapsed, "clips_per_s": clips / elapsed,
            "shape": list(shape)}


def end_to_end(list_path: str, root: str, paths: Sequence[str] = PATHS, clips: int = 16,
               rounds: int = 3, timeout: float = 900) -> list[dict[str, Any]]:
    """Clips/s of each path on the videos of a list, ``rounds`` fresh processes per path of
    ``clips`` clips each, the paths taking turns (order reversed every other round: A B B A).

    Returns:
        One row per path: ``clips``, ``clips_per_s`` (all rounds together), ``rounds`` (each
        round's clips/s); or ``error`` (one line).
    """
    runs: dict[str, list[dict[str, Any]]] = {p: [] for p in paths}
    for r in range(max(rounds, 1)):
        for p in (paths if r % 2 == 0 else list(reversed(paths))):
            runs[p].append(bench._spawn("benchmarks.clip_loading:_worker", timeout=timeout,
                                        path_name=p, list_path=list_path, root=root,
                                        clips=clips))
    rows = []
    for p in paths:
        errors = [r for r in runs[p] if "error" in r]
        if errors:
            rows.append({"path": p, "error": errors[0]["error"]})
            continue
        total = sum(r["clips"] for r in runs[p])
        rows.append({"path": p, "clips": total,
                     "clips_per_s": total / sum(r["seconds"] for r in runs[p]),
                     "rounds": [round(r["clips_per_s"], 2) for r in runs[p]]})
    return rows


def ratio(rows: list[dict[str, Any]], path: str = "zoo") -> float | None:
    """``path``'s clips/s over the best peer's (None when either is missing)."""
    speed = {r["path"]: r["clips_per_s"] for r in rows if "clips_per_s" in r}
    peers = [speed[p] for p in PEERS if p in speed]
    return speed[path] / max(peers) if path in speed and peers else None


def table(name: str, rows: list[dict[str, Any]]) -> list[str]:
    """The lines reporting one set: clips/s per path, each against the best peer, and the bar."""
    lines = [f"{'path':<12} {'clips/s':>8} {'vs best peer':>13}  rounds"]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['path']:<12} error: {r['error']}")
            continue
        against = ratio(rows, r["path"])
        text = f"{against:.2f}x" if against is not None else "-"
        lines.append(f"{r['path']:<12} {r['clips_per_s']:>8.2f} {text:>13}  "
                     + " ".join(f"{v:.2f}" for v in r["rounds"]))
    zoo = ratio(rows)
    if zoo is not None and name in BARS:
        verdict = "OK" if zoo >= BARS[name] else "BELOW THE BAR"
        lines.append(f"{name}: zoo defaults / best(torchcodec, decord) = {zoo:.2f}x "
                     f"(bar {BARS[name]:.1f}x): {verdict}")
    return lines


def one_pass_error(path: str, short_side: int = 320, frames: int = 16) -> dict[str, float]:
    """How far zoo's one-pass frames are from a full-size sequential PyAV decode followed by
    torchvision's antialiased resize, over the first ``frames`` frames of ``path`` (0..255)."""
    import av
    import numpy as np
    import torch
    from torchvision.transforms.v2 import functional as tvf

    from zoo.data.decode.base import OutputSize
    from zoo.data.decode.pyav import PyAVReader

    with av.open(path) as container:
        full = [f.to_ndarray(format="rgb24") for _, f in zip(range(frames),
                                                              container.decode(video=0))]
    size = list(OutputSize(short_side=short_side).target(*full[0].shape[:2]))
    reference = tvf.resize(torch.from_numpy(np.stack(full)).permute(0, 3, 1, 2), size,
                           antialias=True).permute(0, 2, 3, 1)
    with PyAVReader(path) as video:
        video.set_output_size(OutputSize(short_side=short_side))
        scaled = torch.from_numpy(video.decode_array(list(range(frames))))
    if scaled.shape != reference.shape:
        raise ValueError(f"{path}: one-pass {tuple(scaled.shape)} against {tuple(reference.shape)}")
    diff = (scaled.int() - reference.int()).abs().float()
    return {"mean_abs": float(diff.mean()), "p99_abs": float(np.percentile(diff.numpy(), 99)),
            "max_abs": float(diff.max()), "mean_signed": float((scaled.float()
                                                               - reference.float()).mean())}
