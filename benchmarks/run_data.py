"""``zoo-benchmark-data`` (``tools/benchmark_data.py``): decoding speed and memory of each
decoder, against a naive baseline measured in the same run.

    zoo-benchmark-data --list train.txt --root /data/videos
    zoo-benchmark-data --generate 8 --long-720p     # videos made here, no data needed

For every decoder (and "naive": PyAV decoding every frame of the video to RGB with
``frame.to_ndarray``, then picking the clip's frames) fresh processes with one worker and one
thread of torch read training clips for ``--seconds`` in all (``--rounds`` processes per decoder,
the decoders taking turns): pick the next video, draw a random window of ``--clip-len`` frames
``--frame-rate`` apart, open, decode, close. It reports clips/s and peak RSS
(the process's peak, and the part above its size after the imports: what decoding itself costs).
``--long-720p`` adds one 32-frame clip from a 5-minute 1280x720 video per decoder, each in a fresh
process that imports only the reader (numpy out, no torch) and in one that imports torch.
``--generate N`` writes N 10-second 340x256 H.264 videos (a keyframe every ``--gop`` frames, the
re-encode default of datasets/reencode.py) and uses them. ``--containers mkv webm avi`` measures the
same clips again in other containers (H.264 in Matroska, VP9 in WebM, MPEG-4 Part 2 with B-frames
in AVI): the figures behind ``DATA.DECODER auto``'s choice per container.

``--end-to-end`` measures clip loading as the training loader hands clips over (decoded, resized,
cropped, flipped, uint8: the normalisation runs on the device; one worker, one torch thread): zoo's
defaults (and zoo with one decoder thread, and without the one-pass resize) against torchcodec and
decord each followed by torchvision's v2 resize, crop and flip, on the same clips, in one run, on
generated sets (``--sets``: Kinetics-like 340x256 10-s H.264 GOP 250, and 30-s 1080p H.264 / HEVC
phone-like clips) or on ``--list``:

    zoo-benchmark-data --end-to-end --generate 8 --phone-videos 2

The measuring itself lives in :mod:`benchmarks.data`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import List, Optional

from zoo.cli.parser import tool_parser

from . import clip_loading as e2e
from . import data as bench

DESCRIPTION = ("Decoding speed and memory of each decoder, against a naive baseline measured in "
               "the same run.")


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(DESCRIPTION, __doc__)
    p.add_argument("--list", default="", help="annotation list (gluoncv or CSV)")
    p.add_argument("--root", default="", help="folder the list's paths are relative to")
    p.add_argument("--generate", type=int, default=0, metavar="N",
                   help="write N 10-second 340x256 videos and benchmark them")
    p.add_argument("--out", default="", help="folder for generated videos (default: a temp dir)")
    p.add_argument("--gop", type=int, default=16, help="keyframe interval of generated videos")
    p.add_argument("--decoders", nargs="+", default=bench.DECODERS, choices=bench.DECODERS)
    p.add_argument("--containers", nargs="+", default=[], choices=list(bench.CONTAINERS),
                   help="with --generate: also the same clips in these containers")
    p.add_argument("--clip-len", type=int, default=32)
    p.add_argument("--frame-rate", type=int, default=2, help="stride between sampled frames")
    p.add_argument("--seconds", type=float, default=10.0, help="time per decoder")
    p.add_argument("--min-clips", type=int, default=5, help="clips per decoder at least")
    p.add_argument("--rounds", type=int, default=3,
                   help="processes per decoder, taking turns with the other decoders")
    p.add_argument("--long-720p", action="store_true",
                   help="also decode one clip from a generated 5-minute 720p video")
    p.add_argument("--long-only", action="store_true",
                   help="only the --long-720p measurement (no clips/s table)")
    p.add_argument("--end-to-end", action="store_true",
                   help="clip loading as the training transform produces it, against torchcodec "
                        "and decord + torchvision resize (see above)")
    p.add_argument("--sets", nargs="+", default=list(e2e.SETS), choices=list(e2e.SETS),
                   help="with --end-to-end: the generated sets to measure")
    p.add_argument("--paths", nargs="+", default=e2e.PATHS, choices=e2e.PATHS,
                   help="with --end-to-end: the loading paths to compare")
    p.add_argument("--phone-videos", type=int, default=2, metavar="N",
                   help="with --end-to-end: 1080p videos per codec")
    p.add_argument("--e2e-clips", type=int, default=0, metavar="N",
                   help="clips per process with --end-to-end (0: 16 at 340x256, 4 at 1080p)")
    p.add_argument("--json", default="", help="also write the results to this file")
    return p


def _throughput(args, list_path: str, root: str, decoders: List[str]) -> list:
    return bench.decoder_throughput(list_path, root, decoders, args.clip_len, args.frame_rate,
                                    args.seconds, args.min_clips, args.rounds)


def _clips(args, decoders: List[str]) -> list:
    """The clips/s table of the list (given or generated)."""
    results = _throughput(args, args.list, args.root, decoders)
    print(f"{args.clip_len} frames x stride {args.frame_rate} per clip, one worker, {args.list}")
    print("\n".join(bench.clips_table(results)))
    return results


def _containers(args, out: str, decoders: List[str]) -> dict:
    """The same clips again in each of ``--containers``."""
    lists = bench.generate_containers(out, args.generate, args.gop, args.containers)
    report = {}
    for container, list_path in lists.items():
        rows = _throughput(args, list_path, out, decoders)
        print(f"{container} ({bench.container_codec(container)}):")
        print("\n".join(bench.clips_table(rows)))
        report[container] = rows
    return report


def _long_720p(out: str, decoders: List[str]) -> list:
    """One clip from a generated 5-minute 720p video per decoder, each in a fresh process."""
    long_path = os.path.join(out, "long_720p.mp4")
    if not os.path.isfile(long_path):
        os.makedirs(out, exist_ok=True)
        bench.write_long_video(long_path)
    print("one 32-frame clip (stride 2) from the middle of a 5-minute 1280x720 video, "
          "each in a fresh process:")
    rows = bench.long_clip_rows(long_path, decoders)
    print("\n".join(bench.long_clip_table(rows)))
    return rows


def _end_to_end(args, out: str) -> dict:
    """The --end-to-end tables: each generated set (or the --list), then the one-pass accuracy."""
    targets = {}
    if args.list:
        targets["list"] = (args.list, args.root or os.path.dirname(os.path.abspath(args.list)))
    else:
        for name in args.sets:
            count = (args.generate or 8) if name == "kinetics" else args.phone_videos
            targets[name] = (e2e.generate_set(out, name, count), out)
    report = {}
    for name, (list_path, root) in targets.items():
        clips = args.e2e_clips or (16 if name in ("kinetics", "list") else 4)
        rows = e2e.end_to_end(list_path, root, args.paths, clips, args.rounds)
        print(f"{name}: {clips} clips per process x {args.rounds} rounds, one worker, one torch "
              f"thread ({list_path})")
        print("\n".join(e2e.table(name, rows)))
        report[name] = rows
    if not args.list:
        for name in targets:
            first = os.path.join(out, f"{name}_00.mp4")
            # The default training size (short side 320) leaves 340x256 frames as they are: the
            # Kinetics set is measured at short side 224 to see the filter at work on it too.
            side = 224 if name == "kinetics" else 320
            error = e2e.one_pass_error(first, short_side=side)
            print(f"{name}: one-pass frames (short side {side}) against full-size decode + "
                  "torchvision resize: "
                  f"mean abs {error['mean_abs']:.2f}, p99 {error['p99_abs']:.0f}, max "
                  f"{error['max_abs']:.0f} (0-255), mean signed {error['mean_signed']:+.2f}")
            report[f"{name}_one_pass_error"] = error
    return report


def main(argv: Optional[List[str]] = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    makes_videos = args.generate or args.long_720p or args.long_only or args.end_to_end
    out = args.out or (tempfile.mkdtemp(prefix="zoo_bench_") if makes_videos else "")
    decoders = [d for d in args.decoders if bench.available(d)]
    report = {}
    if args.end_to_end:
        args.paths = [p for p in args.paths if bench.available(p)]
        report["end_to_end"] = _end_to_end(args, out)
    elif not args.long_only:
        if args.generate:
            args.list, args.root = bench.generate(out, args.generate, args.gop), out
        if not args.list:
            p.error("give --list (and --root) or --generate N "
                    "(or --long-only for the 720p clip alone)")
        args.root = args.root or os.path.dirname(os.path.abspath(args.list))
        report["clips"] = _clips(args, decoders)
    if args.containers and args.generate:
        report["containers"] = _containers(args, out, decoders)
    if args.long_720p or args.long_only:
        report["long_720p"] = _long_720p(out, decoders)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
