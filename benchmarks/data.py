"""Decoder benchmarks: each decoder's speed and memory (``tools/benchmark_data.py``).

(The loader's clips/s for a config is :func:`benchmarks.loader.loader_throughput`.)

* :func:`decoder_throughput`: every decoder against a naive baseline (PyAV decoding every frame of
  the video to RGB with ``frame.to_ndarray``, then picking the clip's frames), each in fresh
  processes with one worker and one torch thread, reading training clips: pick the next video,
  draw a random window, open, decode, close (``tools/benchmark_data.py``).
* :func:`long_clip`: one 32-frame clip from the middle of a long video in a fresh process, either
  one that imports only the reader (numpy out, no torch) or one that imports torch as training
  does; reports the time and the process's peak resident size (``--long-720p``).

Memory is the resident size from ``/proc/self/status`` (``VmHWM``, the peak, reset before the
measured part; ``ru_maxrss`` elsewhere): the process's peak, and the part above its size after the
imports, which is what decoding itself costs.

This module imports nothing heavy at its top, so a measuring process pays only for what it measures.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any

from . import child_env

DECODERS = ["naive", "pyav", "opencv", "torchcodec", "decord", "auto"]
# The optional readers: measured only where their package is installed.
_OPTIONAL = {"torchcodec": "torchcodec", "decord": "decord"}
# --containers: the same clips in other containers/codecs (PyAV codec, its options, B-frames).
CONTAINERS = {
    "mp4": None,  # the H.264 .mp4 files generate() writes
    "mkv": ("copy", {}, 0),  # the same H.264 packets in Matroska
    "webm": ("libvpx-vp9", {"deadline": "realtime", "cpu-used": "8", "b": "400k"}, 0),
    "avi": ("mpeg4", {"qscale": "4"}, 2),  # MPEG-4 Part 2 with B-frames, as DivX/Xvid write it
}
# The memory bar: one 32-frame clip from a 5-minute 720p video, process peak below this (MB).
LONG_CLIP_RSS_LIMIT_MB = 400
# The library a reader imports when it opens a file, by decoder name (PyAV comes with the module).
_LIBRARY = {"opencv": "cv2", "frames": "cv2", "image": "cv2", "decord": "decord",
            "torchcodec": "torchcodec.decoders"}
# A fresh interpreter per measurement; it imports this module (stdlib only) and what it measures.
_ENTRY = "import sys; from benchmarks.data import _child; _child(sys.argv[1])"


# ----------------------------------------------------------------------------- videos


def _textured_frames(count: int, height: int, width: int, seed: int,
                     fresh: float = 0.0) -> Iterator[Any]:
    """Smooth random texture panning in a circle: realistic motion for an encoder.

    ``fresh`` > 0: that share of the texture's 16x16 blocks gets new, finer (4x4-pixel) detail
    every frame, which then moves on with the texture: new content an encoder must code as
    Kinetics clips have (0.025 gives ~640 KB for 10 s of 340x256 at x264's default settings).
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 256, (height // 8 + 4, width // 8 + 4, 3), dtype=np.uint8)
    texture = np.kron(cells, np.ones((16, 16, 1), np.uint8))
    blocks = int(fresh * (height // 16) * (width // 16))
    for t in range(count):
        dy = int(16 + 14 * np.sin(t / 15))
        dx = int(16 + 14 * np.cos(t / 20))
        for y, x in zip(rng.integers(0, texture.shape[0] // 16, blocks),
                        rng.integers(0, texture.shape[1] // 16, blocks)):
            detail = rng.integers(0, 256, (4, 4, 3), dtype=np.uint8)
            texture[y * 16 : y * 16 + 16, x * 16 : x * 16 + 16] = np.kron(
                detail, np.ones((4, 4, 1), np.uint8))
        yield np.ascontiguousarray(texture[dy : dy + height, dx : dx + width])


def write_video(path: str, seconds: float, height: int, width: int, gop: int, seed: int = 0,
                fps: int = 25, codec: str = "libx264", preset: str = "veryfast",
                fresh: float = 0.0) -> str:
    """An .mp4 of textured motion (H.264 by default; crf 23, a keyframe every ``gop`` frames;
    ``fresh``: new detail per frame, see :func:`_textured_frames`)."""
    import av

    options = {"preset": preset, "crf": "23", "g": str(gop)}
    if codec == "libx265":
        options["x265-params"] = "log-level=error"
    with av.open(path, "w") as container:
        stream = container.add_stream(codec, rate=fps, options=options)
        stream.height, stream.width, stream.pix_fmt = height, width, "yuv420p"
        for image in _textured_frames(int(seconds * fps), height, width, seed, fresh):
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_long_video(path: str, seconds: int = 300, height: int = 720, width: int = 1280) -> str:
    """A long 720p video made in seconds: 2 s encoded once, their packets muxed again and again."""
    part = write_video(path + ".part.mp4", 2, height, width, gop=25)
    return repeat_video(part, path, seconds // 2)


def repeat_video(part: str, path: str, copies: int) -> str:
    """``part``'s packets muxed ``copies`` times one after the other into ``path`` (a long video
    for the price of a short encode); ``part`` is removed."""
    import av

    with av.open(part) as src, av.open(path, "w") as dst:
        stream = src.streams.video[0]
        out = dst.add_stream_from_template(stream)
        packets = [p for p in src.demux(stream) if p.size]
        # One copy lasts one frame duration per packet (packets come in decode order, so the
        # difference of the first two timestamps is not a frame's duration with B-frames).
        span = round(len(packets) / (stream.average_rate * stream.time_base))
        for copy in range(max(copies, 1)):
            for packet in packets:
                clone = av.Packet(bytes(packet))
                clone.pts, clone.dts = packet.pts + copy * span, packet.dts + copy * span
                clone.time_base, clone.is_keyframe, clone.stream = packet.time_base, \
                    packet.is_keyframe, out
                dst.mux(clone)
    os.remove(part)
    return path


def generate(folder: str, count: int, gop: int, processes: int = 1) -> str:
    """``count`` 10-second 340x256 videos and a gluoncv list of them; returns the list path.
    ``processes`` > 1 encodes that many videos at a time (each in a forked process)."""
    import multiprocessing

    os.makedirs(folder, exist_ok=True)
    names = [f"clip_{i:03d}.mp4" for i in range(count)]
    todo = [(os.path.join(folder, name), 10, 256, 340, gop, i) for i, name in enumerate(names)
            if not os.path.isfile(os.path.join(folder, name))]
    if processes > 1 and len(todo) > 1:
        with multiprocessing.get_context("fork").Pool(min(processes, len(todo))) as pool:
            pool.starmap(write_video, todo)
    else:
        for job in todo:
            write_video(*job)
    lines = [f"{name} 250 0\n" for name in names]
    path = os.path.join(folder, "list.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path


def convert(src: str, dst: str, container: str, gop: int) -> str:
    """``src`` (an .mp4 from :func:`write_video`) in another container, see :data:`CONTAINERS`;
    a re-encode puts a keyframe every ``gop`` frames, as the source has."""
    import av

    codec, options, b_frames = CONTAINERS[container]
    options = {**options, "g": str(gop)}
    with av.open(src) as source, av.open(dst, "w") as out:
        video = source.streams.video[0]
        if codec == "copy":
            stream = out.add_stream_from_template(video)
            for packet in source.demux(video):
                if packet.size:
                    packet.stream = stream
                    out.mux(packet)
            return dst
        stream = out.add_stream(codec, rate=video.average_rate, options=dict(options))
        stream.width, stream.height, stream.pix_fmt = video.width, video.height, "yuv420p"
        if b_frames:
            stream.codec_context.max_b_frames = b_frames
        if container == "avi":
            stream.codec_context.codec_tag = "XVID"
        for i, frame in enumerate(source.decode(video)):
            frame.pts, frame.time_base = i, 1 / video.average_rate  # numbered afresh, 1/fps
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return dst


def container_codec(container: str) -> str:
    """What --containers writes in ``container``, in words."""
    spec = CONTAINERS[container]
    if spec is None or spec[0] == "copy":
        return "H.264"
    return {"libvpx-vp9": "VP9", "mpeg4": "MPEG-4 Part 2"}.get(spec[0], spec[0]) + (
        f", {spec[2]} B-frames" if spec[2] else "")


def generate_containers(folder: str, count: int, gop: int,
                        containers: Sequence[str]) -> dict[str, str]:
    """:func:`generate`'s videos in each of ``containers``; a list path per container."""
    mp4_list = generate(folder, count, gop)
    lists = {}
    for container in containers:
        if container == "mp4":
            lists[container] = mp4_list
            continue
        lines = []
        for i in range(count):
            name = f"clip_{i:03d}.{container}"
            if not os.path.isfile(os.path.join(folder, name)):
                convert(os.path.join(folder, f"clip_{i:03d}.mp4"), os.path.join(folder, name),
                        container, gop)
            lines.append(f"{name} 250 0\n")
        lists[container] = os.path.join(folder, f"list_{container}.txt")
        with open(lists[container], "w", encoding="utf-8") as f:
            f.writelines(lines)
    return lists


# ----------------------------------------------------------------------------- memory


def memory_mb() -> dict[str, float]:
    """This process's current (``rss``) and peak (``peak``) resident size in MB.

    Linux ``/proc/self/status`` (``VmRSS``, ``VmHWM``); elsewhere ``ru_maxrss``, the peak only.
    """
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        return {"rss": int(fields["VmRSS"].split()[0]) / 1024,
                "peak": int(fields["VmHWM"].split()[0]) / 1024}
    except (OSError, KeyError):
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = peak / 2**20 if sys.platform == "darwin" else peak / 1024  # bytes there, KB here
        return {"rss": peak, "peak": peak}


def reset_peak() -> bool:
    """Reset the peak resident size to the current size (Linux); False where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
        return True
    except OSError:
        return False


# ----------------------------------------------------------------------------- measuring processes


def naive_clip(path: str, indices: list[int]):
    """The baseline: every frame decoded and converted to RGB, then the clip's frames picked."""
    import av
    import numpy as np

    with av.open(path) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    return np.stack(frames)[np.minimum(indices, len(frames) - 1)]


def _clip(decoder: str, path: str, hint: int, clip_len: int, stride: int, generator):
    from zoo.data import sampling
    from zoo.data.decode.registry import open_video

    if decoder == "naive":
        n = hint
        if n <= 0:
            with open_video(path, "pyav") as video:
                n = video.num_frames
        return naive_clip(path, sampling.train_indices(n, clip_len, stride, generator).tolist())
    with open_video(path, decoder, hint) as video:
        indices = sampling.train_indices(video.num_frames, clip_len, stride, generator)
        return video.decode(indices.tolist())


def _clips_worker(decoder: str, list_path: str, root: str, clip_len: int, stride: int,
                  seconds: float, min_clips: int) -> dict[str, Any]:
    """Read training clips with ``decoder`` for ``seconds`` in this process; its figures."""
    import torch

    from zoo.data.lists.annotations import read_annotations

    torch.set_num_threads(1)
    items = [(os.path.join(root, r.path), r.num_frames) for r in read_annotations(list_path)]
    generator = torch.Generator().manual_seed(0)
    _clip(decoder, *items[0], clip_len, stride, generator)  # warm-up: imports, first open
    before = memory_mb()
    reset_peak()
    clips, start = 0, time.perf_counter()
    while clips < min_clips or time.perf_counter() - start < seconds:
        path, hint = items[clips % len(items)]
        _clip(decoder, path, hint, clip_len, stride, generator)
        clips += 1
    elapsed = time.perf_counter() - start
    after = memory_mb()
    return {"decoder": decoder, "clips": clips, "clips_per_s": clips / elapsed,
            "peak_rss_mb": max(after["peak"], before["peak"]),
            "decode_rss_mb": after["peak"] - before["rss"], "baseline_rss_mb": before["rss"]}


def _long_clip_worker(path: str, decoder: str, torch_free: bool, clip_len: int = 32,
                      stride: int = 2) -> dict[str, Any]:
    """One clip from the middle of ``path``, measured in this (fresh) process.

    With ``torch_free`` only the readers are imported and the clip stays a numpy array; otherwise
    torch is imported first and the clip is a tensor, as in a training process.
    """
    import importlib

    if not torch_free:
        import torch  # noqa: F401  (its size is what this variant measures)
    from zoo.data.decode.registry import open_video

    if decoder in _LIBRARY:  # imported by the reader when it opens a file: an import, not decoding
        importlib.import_module(_LIBRARY[decoder])
    before = memory_mb()
    reset_peak()
    start = time.perf_counter()
    with open_video(path, decoder) as video:
        middle = video.num_frames // 2
        indices = list(range(middle, middle + clip_len * stride, stride))
        frames = video.decode_array(indices) if torch_free else video.decode(indices)
    seconds = time.perf_counter() - start
    after = memory_mb()
    return {"decoder": decoder, "process": "torch-free" if torch_free else "imports torch",
            "torch_imported": "torch" in sys.modules, "seconds": seconds,
            "shape": list(frames.shape), "decode_rss_mb": after["peak"] - before["rss"],
            "baseline_rss_mb": before["rss"], "peak_rss_mb": max(after["peak"], before["peak"])}


def _child(request: str) -> None:
    """Entry of a measuring process: run the worker named in the JSON ``request``, print JSON."""
    params = json.loads(request)
    name = params.pop("worker")
    if ":" in name:  # "module:function", e.g. the end-to-end worker of benchmarks.clip_loading
        module, _, function = name.partition(":")
        worker = getattr(importlib.import_module(module), function)
    else:
        worker = {"clips": _clips_worker, "long": _long_clip_worker}[name]
    print(json.dumps(worker(**params)))


def _spawn(worker: str, timeout: float | None = None, **params: Any) -> dict[str, Any]:
    """Run ``worker`` in a fresh interpreter; its result, or ``{"error": last line}``."""
    env = child_env(os.environ)
    request = json.dumps({"worker": worker, **params})
    try:
        result = subprocess.run([sys.executable, "-c", _ENTRY, request], check=False,
                                capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"decoder": params.get("decoder"), "error": f"took longer than {timeout:g} s"}
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or [f"exited with {result.returncode}"]
        return {"decoder": params.get("decoder"), "error": lines[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------- benchmarks


def available(decoder: str) -> bool:
    """Whether ``decoder`` can run here (torchcodec and decord are optional)."""
    if decoder in _OPTIONAL:
        import importlib.util

        if importlib.util.find_spec(_OPTIONAL[decoder]) is None:
            return False
        if decoder == "torchcodec":  # installed is not enough: it may not load FFmpeg
            from zoo.data.decode.torchcodec import torchcodec_unusable

            return not torchcodec_unusable()
    return True


def decoder_throughput(list_path: str, root: str, decoders: Sequence[str] = DECODERS,
                       clip_len: int = 32, stride: int = 2, seconds: float = 10.0,
                       min_clips: int = 5, rounds: int = 3) -> list[dict[str, Any]]:
    """Clips/s and peak RSS of each decoder, reading training clips from the videos of a list.

    Each decoder runs in ``rounds`` fresh processes of ``seconds / rounds`` each, the decoders
    taking turns, so that a machine whose load changes during the run (shared CI boxes) slows
    every decoder alike.

    Args:
        list_path: Annotation list (gluoncv or CSV).
        root: The folder the list's paths are relative to.
        decoders: Names from :data:`DECODERS` ("naive" is the baseline).
        clip_len: Frames per clip; ``stride`` is the step between them.
        seconds: Time per decoder, all rounds together; ``min_clips`` clips per decoder at least.

    Returns:
        One row per decoder: ``clips``, ``clips_per_s``, ``peak_rss_mb`` (the process's peak),
        ``decode_rss_mb`` (the peak above the size after the imports), ``baseline_rss_mb``; or
        ``error`` (one line) when its process failed.
    """
    rounds = max(rounds, 1)
    share = {"list_path": list_path, "root": root, "clip_len": clip_len, "stride": stride,
             "seconds": seconds / rounds, "min_clips": max(min_clips // rounds, 1)}
    runs: dict[str, list[dict[str, Any]]] = {d: [] for d in decoders}
    for _ in range(rounds):
        for d in decoders:
            runs[d].append(_spawn("clips", decoder=d, **share))
    results = []
    for d in decoders:
        errors = [r for r in runs[d] if "error" in r]
        if errors:
            results.append(errors[0])
            continue
        clips = sum(r["clips"] for r in runs[d])
        elapsed = sum(r["clips"] / r["clips_per_s"] for r in runs[d])
        results.append({
            "decoder": d, "clips": clips, "clips_per_s": clips / elapsed,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs[d]),
            "decode_rss_mb": max(r["decode_rss_mb"] for r in runs[d]),
            "baseline_rss_mb": min(r["baseline_rss_mb"] for r in runs[d]),
        })
    return results


def long_clip(path: str, decoder: str = "pyav", torch_free: bool = True, clip_len: int = 32,
              stride: int = 2, timeout: float = 300) -> dict[str, Any]:
    """Decode one clip from the middle of ``path`` in a fresh process and measure it.

    Args:
        path: A (long) video.
        decoder: A name in ``zoo.data.decode.registry.DECODERS``.
        torch_free: Import only the readers and keep the clip in numpy (``decode_array``); False
            imports torch first and decodes to a tensor, as a training process does.
        clip_len: Frames per clip; ``stride`` is the step between them.

    Returns:
        ``seconds`` (open + decode), ``shape``, ``peak_rss_mb`` (the process's peak),
        ``decode_rss_mb`` (the peak above the size after the imports), ``baseline_rss_mb``,
        ``torch_imported``; or ``error`` (one line).
    """
    return _spawn("long", timeout=timeout, path=path, decoder=decoder, torch_free=torch_free,
                  clip_len=clip_len, stride=stride)


def long_clip_rows(path: str, decoders: Sequence[str]) -> list[dict[str, Any]]:
    """:func:`long_clip` for each decoder (naive left out), torch-free and importing torch."""
    rows = []
    for d in decoders:
        if d == "naive":
            continue  # would hold every RGB frame of the video (~20 GB for 5 minutes of 720p)
        for torch_free in (True, False):
            rows.append(long_clip(path, d, torch_free))
    return rows


# ----------------------------------------------------------------------------- reports


def clips_table(results: list[dict[str, Any]]) -> list[str]:
    """The lines of the clips/s table, each decoder against "naive" when it was measured."""
    naive = next((r["clips_per_s"] for r in results
                  if r["decoder"] == "naive" and "clips_per_s" in r), None)
    lines = [f"{'decoder':<10} {'clips/s':>8} {'vs naive':>9} {'peak RSS MB':>12} "
             f"{'decode MB':>10}"]
    for r in results:
        if "error" in r:
            lines.append(f"{r['decoder']:<10} error: {r['error']}")
            continue
        ratio = f"{r['clips_per_s'] / naive:.2f}x" if naive else "-"
        lines.append(f"{r['decoder']:<10} {r['clips_per_s']:>8.1f} {ratio:>9} "
                     f"{r['peak_rss_mb']:>12.0f} {r['decode_rss_mb']:>10.0f}")
    return lines


def long_clip_table(rows: list[dict[str, Any]], what: str = "5-min 720p") -> list[str]:
    """The lines reporting :func:`long_clip_rows`, ending with the verdict on the RSS limit."""
    header = (f"{'decoder':<10} {'process':<14} {'time':>7} {'decode MB':>10} "
              f"{'after imports':>14} {'peak MB':>8}")
    lines = [header]
    for r in rows:
        if "error" in r:
            lines.append(f"{r['decoder']:<10} error: {r['error']}")
            continue
        lines.append(f"{r['decoder']:<10} {r['process']:<14} {r['seconds']:>6.2f}s "
                     f"{r['decode_rss_mb']:>10.0f} {r['baseline_rss_mb']:>14.0f} "
                     f"{r['peak_rss_mb']:>8.0f}")
    verdict = next((r for r in rows if r.get("decoder") == "pyav" and
                    r.get("process") == "torch-free"), None)
    if verdict is not None:
        ok = verdict["peak_rss_mb"] < LONG_CLIP_RSS_LIMIT_MB
        lines.append(f"{what}, one {verdict['shape'][0]}-frame clip, pyav: "
                     f"{verdict['seconds']:.2f} s, process peak {verdict['peak_rss_mb']:.0f} MB "
                     f"without torch (limit {LONG_CLIP_RSS_LIMIT_MB} MB): "
                     f"{'OK' if ok else 'OVER THE LIMIT'}")
    return lines
