#!/usr/bin/env python
"""Decoding speed and memory of each decoder, against a naive baseline measured in the same run.

    python tools/benchmark_data.py --list train.txt --root /data/videos
    python tools/benchmark_data.py --generate 8 --long-720p     # videos made here, no data needed

For every decoder (and "naive": PyAV decoding every frame of the video to RGB with
``frame.to_ndarray``, then picking the clip's frames) fresh processes with one worker and one
thread of torch read training clips for ``--seconds`` in all (``--rounds`` processes per decoder,
the decoders taking turns): pick the next video, draw a random window of ``--clip-len`` frames
``--frame-rate`` apart, open, decode, close. It reports clips/s and peak RSS
(the process's peak, and the part above its size after the imports: what decoding itself costs).
``--long-720p`` adds one 32-frame clip from a 5-minute 1280x720 video per decoder.
``--generate N`` writes N 10-second 340x256 H.264 videos (a keyframe every ``--gop`` frames, the
re-encode default of datasets/reencode.py) and uses them.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from typing import Dict, List

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

DECODERS = ["naive", "pyav", "opencv", "decord"]


# ----------------------------------------------------------------------------- videos


def _textured_frames(count: int, height: int, width: int, seed: int):
    """Smooth random texture panning in a circle: realistic motion for an encoder."""
    import numpy as np

    rng = np.random.default_rng(seed)
    cells = rng.integers(0, 256, (height // 8 + 4, width // 8 + 4, 3), dtype=np.uint8)
    texture = np.kron(cells, np.ones((16, 16, 1), np.uint8))
    for t in range(count):
        dy = int(16 + 14 * np.sin(t / 15))
        dx = int(16 + 14 * np.cos(t / 20))
        yield np.ascontiguousarray(texture[dy : dy + height, dx : dx + width])


def write_video(path: str, seconds: float, height: int, width: int, gop: int, seed: int = 0,
                fps: int = 25) -> str:
    """An H.264 .mp4 of textured motion (veryfast, crf 23, a keyframe every ``gop`` frames)."""
    import av

    options = {"preset": "veryfast", "crf": "23", "g": str(gop)}
    with av.open(path, "w") as container:
        stream = container.add_stream("libx264", rate=fps, options=options)
        stream.height, stream.width, stream.pix_fmt = height, width, "yuv420p"
        for image in _textured_frames(int(seconds * fps), height, width, seed):
            for packet in stream.encode(av.VideoFrame.from_ndarray(image, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_long_video(path: str, seconds: int = 300, height: int = 720, width: int = 1280) -> str:
    """A long 720p video made in seconds: 2 s encoded once, their packets muxed again and again."""
    import av

    part = write_video(path + ".part.mp4", 2, height, width, gop=25)
    with av.open(part) as src, av.open(path, "w") as dst:
        stream = src.streams.video[0]
        out = dst.add_stream_from_template(stream)
        packets = [p for p in src.demux(stream) if p.size]
        span = (packets[1].pts - packets[0].pts) * len(packets)
        for copy in range(max(seconds // 2, 1)):
            for packet in packets:
                clone = av.Packet(bytes(packet))
                clone.pts, clone.dts = packet.pts + copy * span, packet.dts + copy * span
                clone.time_base, clone.is_keyframe, clone.stream = packet.time_base, \
                    packet.is_keyframe, out
                dst.mux(clone)
    os.remove(part)
    return path


def generate(folder: str, count: int, gop: int) -> str:
    """``count`` 10-second 340x256 videos and a gluoncv list of them; returns the list path."""
    os.makedirs(folder, exist_ok=True)
    lines = []
    for i in range(count):
        name = f"clip_{i:03d}.mp4"
        if not os.path.isfile(os.path.join(folder, name)):
            write_video(os.path.join(folder, name), 10, 256, 340, gop, seed=i)
        lines.append(f"{name} 250 0\n")
    path = os.path.join(folder, "list.txt")
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(lines)
    return path


# ----------------------------------------------------------------------------- one process


def _memory() -> Dict[str, float]:
    """Current and peak resident size in MB (Linux /proc; elsewhere the peak only)."""
    try:
        with open("/proc/self/status") as f:
            fields = dict(line.split(":", 1) for line in f)
        return {"rss": int(fields["VmRSS"].split()[0]) / 1024,
                "peak": int(fields["VmHWM"].split()[0]) / 1024}
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        peak = peak / 1024 if sys.platform != "darwin" else peak / 2**20
        return {"rss": peak, "peak": peak}


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def naive_clip(path: str, indices: List[int]):
    """The baseline: every frame decoded and converted to RGB, then the clip's frames picked."""
    import av
    import numpy as np

    with av.open(path) as container:
        frames = [frame.to_ndarray(format="rgb24") for frame in container.decode(video=0)]
    return np.stack(frames)[np.minimum(indices, len(frames) - 1)]


def _clip(decoder: str, path: str, hint: int, clip_len: int, stride: int, generator):
    from zoo.data import sampling
    from zoo.data.decoders import open_video

    if decoder == "naive":
        n = hint if hint > 0 else 0
        if n <= 0:
            with open_video(path, "pyav") as video:
                n = video.num_frames
        return naive_clip(path, sampling.train_indices(n, clip_len, stride, generator).tolist())
    with open_video(path, decoder, hint) as video:
        indices = sampling.train_indices(video.num_frames, clip_len, stride, generator)
        return video.decode(indices.tolist())


def worker(args: argparse.Namespace) -> Dict[str, float]:
    """Run one decoder in this process and return its figures."""
    import torch

    from zoo.data.annotations import read_annotations

    torch.set_num_threads(1)
    records = read_annotations(args.list)
    items = [(os.path.join(args.root, r.path), r.num_frames) for r in records]
    generator = torch.Generator().manual_seed(0)
    _clip(args.worker, *items[0], args.clip_len, args.frame_rate, generator)  # warm-up, imports
    before = _memory()
    _reset_peak()
    clips, start = 0, time.perf_counter()
    while clips < args.min_clips or time.perf_counter() - start < args.seconds:
        path, hint = items[clips % len(items)]
        _clip(args.worker, path, hint, args.clip_len, args.frame_rate, generator)
        clips += 1
    elapsed = time.perf_counter() - start
    after = _memory()
    return {"decoder": args.worker, "clips": clips, "clips_per_s": clips / elapsed,
            "peak_rss_mb": max(after["peak"], before["peak"]),
            "decode_rss_mb": after["peak"] - before["rss"], "baseline_rss_mb": before["rss"]}


def one_long_clip(args: argparse.Namespace) -> Dict[str, float]:
    """Decode one 32-frame clip (stride 2) from the middle of ``args.long`` and measure it."""
    from zoo.data.decoders import open_video

    before = _memory()
    _reset_peak()
    start = time.perf_counter()
    with open_video(args.long, args.worker) as video:
        middle = video.num_frames // 2
        frames = video.decode(list(range(middle, middle + 64, 2)))
    seconds = time.perf_counter() - start
    after = _memory()
    return {"decoder": args.worker, "seconds": seconds, "shape": list(frames.shape),
            "decode_rss_mb": after["peak"] - before["rss"], "baseline_rss_mb": before["rss"],
            "peak_rss_mb": max(after["peak"], before["peak"])}


# ----------------------------------------------------------------------------- driver


def _available(name: str) -> bool:
    if name == "decord":
        import importlib.util

        return importlib.util.find_spec("decord") is not None
    return True


def _spawn(args: argparse.Namespace, decoder: str, extra: List[str]) -> Dict[str, float]:
    cmd = [sys.executable, os.path.abspath(__file__), "--list", args.list, "--root", args.root,
           "--clip-len", str(args.clip_len), "--frame-rate", str(args.frame_rate),
           "--seconds", str(args.seconds), "--min-clips", str(args.min_clips),
           "--worker", decoder, *extra]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        return {"decoder": decoder, "error": (result.stderr.strip().splitlines() or ["?"])[-1]}
    return json.loads(result.stdout.strip().splitlines()[-1])


def _measure_in_rounds(args: argparse.Namespace, decoders: List[str]) -> List[Dict[str, float]]:
    """Each decoder in ``args.rounds`` short processes, taking turns, so that a machine whose load
    changes during the run (shared CI boxes) slows every decoder alike."""
    rounds = max(args.rounds, 1)
    share = argparse.Namespace(**vars(args))
    share.seconds = args.seconds / rounds
    share.min_clips = max(args.min_clips // rounds, 1)
    runs: Dict[str, List[Dict[str, float]]] = {d: [] for d in decoders}
    for _ in range(rounds):
        for d in decoders:
            runs[d].append(_spawn(share, d, []))
    results = []
    for d in decoders:
        errors = [r for r in runs[d] if "error" in r]
        if errors:
            results.append(errors[0])
            continue
        clips = sum(r["clips"] for r in runs[d])
        seconds = sum(r["clips"] / r["clips_per_s"] for r in runs[d])
        results.append({
            "decoder": d, "clips": clips, "clips_per_s": clips / seconds,
            "peak_rss_mb": max(r["peak_rss_mb"] for r in runs[d]),
            "decode_rss_mb": max(r["decode_rss_mb"] for r in runs[d]),
            "baseline_rss_mb": min(r["baseline_rss_mb"] for r in runs[d]),
        })
    return results


def main(argv: List[str] = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--list", default="", help="annotation list (gluoncv or CSV)")
    p.add_argument("--root", default="", help="folder the list's paths are relative to")
    p.add_argument("--generate", type=int, default=0, metavar="N",
                   help="write N 10-second 340x256 videos and benchmark them")
    p.add_argument("--out", default="", help="folder for generated videos (default: a temp dir)")
    p.add_argument("--gop", type=int, default=16, help="keyframe interval of generated videos")
    p.add_argument("--decoders", nargs="+", default=DECODERS, choices=DECODERS)
    p.add_argument("--clip-len", type=int, default=32)
    p.add_argument("--frame-rate", type=int, default=2, help="stride between sampled frames")
    p.add_argument("--seconds", type=float, default=10.0, help="time per decoder")
    p.add_argument("--min-clips", type=int, default=5, help="clips per decoder at least")
    p.add_argument("--rounds", type=int, default=3,
                   help="processes per decoder, taking turns with the other decoders")
    p.add_argument("--long-720p", action="store_true",
                   help="also decode one clip from a generated 5-minute 720p video")
    p.add_argument("--json", default="", help="also write the results to this file")
    p.add_argument("--worker", default="", help=argparse.SUPPRESS)
    p.add_argument("--long", default="", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.worker:  # inside a measuring process
        print(json.dumps(one_long_clip(args) if args.long else worker(args)))
        return 0
    out = args.out or tempfile.mkdtemp(prefix="zoo_bench_")
    if args.generate:
        args.list, args.root = generate(out, args.generate, args.gop), out
    if not args.list:
        p.error("give --list (and --root) or --generate N")
    args.root = args.root or os.path.dirname(os.path.abspath(args.list))
    decoders = [d for d in args.decoders if _available(d)]
    results = _measure_in_rounds(args, decoders)
    naive = next((r["clips_per_s"] for r in results if r["decoder"] == "naive" and
                  "clips_per_s" in r), None)
    print(f"{args.clip_len} frames x stride {args.frame_rate} per clip, one worker, {args.list}")
    print(f"{'decoder':<8} {'clips/s':>8} {'vs naive':>9} {'peak RSS MB':>12} {'decode MB':>10}")
    for r in results:
        if "error" in r:
            print(f"{r['decoder']:<8} error: {r['error']}")
            continue
        ratio = f"{r['clips_per_s'] / naive:.2f}x" if naive else "-"
        print(f"{r['decoder']:<8} {r['clips_per_s']:>8.1f} {ratio:>9} {r['peak_rss_mb']:>12.0f} "
              f"{r['decode_rss_mb']:>10.0f}")
    report = {"clips": results}
    if args.long_720p:
        long_path = os.path.join(out, "long_720p.mp4")
        if not os.path.isfile(long_path):
            write_long_video(long_path)
        print("one 32-frame clip (stride 2) from a 5-minute 1280x720 video:")
        report["long_720p"] = []
        for d in decoders:
            if d == "naive":
                continue  # would hold 7,500 RGB frames (~20 GB)
            r = _spawn(args, d, ["--long", long_path])
            report["long_720p"].append(r)
            if "error" in r:
                print(f"  {d:<8} error: {r['error']}")
            else:
                print(f"  {d:<8} {r['seconds']:.2f} s, decode {r['decode_rss_mb']:.0f} MB above "
                      f"the {r['baseline_rss_mb']:.0f} MB after imports, "
                      f"peak {r['peak_rss_mb']:.0f} MB")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
