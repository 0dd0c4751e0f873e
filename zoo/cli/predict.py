"""``zoo-predict`` (``tools/predict.py``): print the top-5 classes of video files with a trained
checkpoint.

The model (name, kwargs, class count) and the class names are the checkpoint's; MODEL.PRETRAINED
is not read. Without ``--config-file`` the clip settings (frames, crop, test views, normalisation)
are the config the checkpoint was trained with, which every zoo training checkpoint records. A
converted checkpoint (tools/convert_checkpoint.py) records only its model: its clip is the one its
MODEL.KWARGS frames / crop_size build the model for, else the model's published input (frames,
stride, crop), at the default DATA.TEST_NUM_SEGMENT x TEST_NUM_CROP views; where neither tells,
give the clip as overrides (DATA.CLIP_LEN, DATA.CROP_SIZE) or --config-file. The clip and views
used are logged.

    zoo-predict --checkpoint ckpt.pth a.mp4 b.mp4 [--json] [KEY VALUE ...]
    zoo-predict --checkpoint ckpt.pth my_videos/ [--json]
    zoo-predict --checkpoint ckpt.pth long.mp4 --window 2 [--stride 1]
    zoo-predict --config-file x.yaml --checkpoint ckpt.pth a.mp4 [KEY VALUE ...]

A folder stands for the video files under it (any depth, sorted; hidden files and folders are
passed over; the extensions of zoo.data.lists.records.VIDEO_EXTS count). A checkpoint trained on
images (DATA.DATASET ImageFolderDataset or ImageListDataset) scores image files instead, as
tools/test_ddp.py does (the "image" decoder, TEST_NUM_CROP views): a folder stands for the image
files under it (IMAGE_EXTS), and --window is refused. With --window a video is
scored window by window (each read as testing reads a video: its TEST_NUM_SEGMENT x TEST_NUM_CROP
views inside the window), one every --stride seconds.

The videos end at the first config key (``DATA.TEST_NUM_SEGMENT``: upper case, not an existing
file); it and what follows are overrides, as in every other command. ``--opts KEY VALUE ...``
(the old spelling) still works, with a warning.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from typing import List, Optional, Tuple

from ..utils.errors import UsageError
from ..utils.logger import setup_logger
from .command import command
from .configure import setup_cfg
from .parser import looks_like_key, tool_parser

DESCRIPTION = "Print the top-5 classes of video files with a trained checkpoint."


def build_parser() -> argparse.ArgumentParser:
    p = tool_parser(DESCRIPTION, __doc__, config=True, overrides=False)
    p.spill_dest = "videos"
    p.add_argument("--checkpoint", required=True, help="zoo checkpoint (.pth)")
    p.add_argument("--topk", type=int, default=5, help="classes to show per video")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--window", type=float, default=0.0, metavar="SECONDS",
                   help="score each window of this many seconds (0 = the whole video)")
    p.add_argument("--stride", type=float, default=0.0, metavar="SECONDS",
                   help="seconds between window starts (0 = --window: side by side)")
    p.add_argument("--device", default="auto",
                   help="where the model runs: auto (the first GPU when one is visible, else "
                        "the CPU), cpu, cuda or cuda:N")
    p.add_argument("--opts", nargs="*", default=None, dest="old_opts", metavar="KEY VALUE",
                   help="deprecated: give KEY VALUE overrides after the videos instead")
    p.add_argument("videos", nargs="*", metavar="VIDEO [KEY VALUE ...]",
                   help="video files or folders of them, then KEY VALUE config overrides")
    return p


def split_videos(tokens: List[str]) -> Tuple[List[str], List[str]]:
    """``(videos, overrides)``: the overrides start at the first config key."""
    end = next((i for i, t in enumerate(tokens) if looks_like_key(t)), len(tokens))
    return tokens[:end], [t for t in tokens[end:] if t != "--"]


def _number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True


def parse_args(argv: Optional[List[str]] = None) -> argparse.Namespace:
    """The command line, with ``args.videos`` and ``args.opts`` (trailing and ``--opts``)."""
    p = build_parser()
    args, rest = p.parse_known_args(argv)
    # Videos and overrides after a flag (``a.mp4 --json KEY VALUE``) are positionals argparse
    # did not take: they continue the list.
    unknown = [t for t in rest if t.startswith("-") and t != "--" and not _number(t)]
    if unknown:
        p.error(f"unrecognized arguments: {' '.join(unknown)}")
    args.videos, args.opts = split_videos(list(args.videos) + rest)
    if args.old_opts is not None:
        print("warning: --opts is deprecated; put KEY VALUE overrides after the videos",
              file=sys.stderr)
        args.opts += args.old_opts
    if not args.videos:
        p.error("give at least one video file")
    if args.topk < 1:
        p.error(f"--topk {args.topk}: show at least 1 class per video")
    if args.window < 0 or args.stride < 0 or (args.stride and not args.window):
        p.error(f"--window {args.window:g} --stride {args.stride:g}: both are seconds >= 0, and "
                "--stride needs --window")
    return args


def videos_of(paths: List[str], images: bool = False) -> List[str]:
    """``paths`` with each folder replaced by the video files under it (the image files, with
    ``images``: for a checkpoint trained on images), sorted, hidden entries passed over; files
    are kept as given.

    Raises:
        UsageError: A folder holds no file of the kind.
    """
    from ..data.lists.records import IMAGE_EXTS, VIDEO_EXTS
    from ..data.lists.sources import visible_walk

    exts, kind = (IMAGE_EXTS, "image") if images else (VIDEO_EXTS, "video")
    out = []
    for path in paths:
        if not os.path.isdir(path):
            out.append(path)
            continue
        found, skipped = [], []
        for folder, _, names in visible_walk(path):
            for f in names:
                if f.lower().endswith(exts):
                    found.append(os.path.join(folder, f))
                else:
                    skipped.append(os.path.relpath(os.path.join(folder, f), path))
        if not found:
            trained = " (the checkpoint was trained on images)" if images else ""
            raise UsageError(f"the folder {path!r} holds no {kind} file{trained} (these "
                             f"extensions count: {' '.join(exts)})")
        if skipped:
            article = "an" if images else "a"
            print(f"{path}: {len(skipped)} file(s) passed over, not of {article} {kind} "
                  f"extension (e.g. {skipped[0]}); name a file on the command line to predict "
                  "it anyway", file=sys.stderr)
        out += found
    return out


def _device(name: str) -> str:
    """``--device`` as a torch device name; a device this machine does not have is a usage
    error naming what it has."""
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        device = torch.device(name)
    except RuntimeError:
        raise UsageError(f"--device {name!r} is not a device: give auto, cpu, cuda or "
                         "cuda:N") from None
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if device.type == "cuda" and (device.index or 0) >= gpus:
        raise UsageError(f"--device {name}: this machine has {gpus} CUDA GPU(s) visible; give "
                         "auto or cpu" + (f", or cuda:0 to cuda:{gpus - 1}" if gpus else ""))
    if device.type not in ("cpu", "cuda"):
        raise UsageError(f"--device {name}: zoo-predict runs on cpu or cuda")
    return name


def _print_text(results: list) -> None:
    for r in results:
        if "error" in r:
            print(f"{r['video']}: ERROR {r['error']}")
            continue
        print(r["video"])
        for w in r.get("windows", [r]):
            indent = "  "
            if "start" in w:
                print(f"  {w['start']:.2f}-{w['end']:.2f} s")
                indent = "    "
            for i, t in enumerate(w["top"], 1):
                print(f"{indent}{i}. {t['name']:<24} {t['prob']:.4f}")


def recorded_config(checkpoint: str, folder: str, state: Optional[dict] = None) -> str:
    """The config ``checkpoint`` was trained with, written into ``folder`` as a YAML file; its
    path. ``state``: the checkpoint's contents, when read already."""
    if state is None:
        from ..utils.checkpoint_io import load_checkpoint

        state = load_checkpoint(checkpoint)
    text = state.get("cfg")
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"--checkpoint {checkpoint!r} records no config (converted or published "
                         "weights): give the run's config with --config-file")
    path = os.path.join(folder, "recorded_config.yaml")
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def clip_overrides(checkpoint: str, state: dict, opts: List[str]) -> List[str]:
    """``KEY VALUE`` overrides of the clip of a checkpoint whose config records none (converted
    weights: :func:`zoo.infer.checkpoint_model.checkpoint_clip`), leaving out the keys ``opts``
    sets; [] for a checkpoint that records its clip.

    Raises:
        UsageError: The clip length or crop cannot be known and ``opts`` does not give it.
    """
    from ..infer.checkpoint_model import checkpoint_clip, records_clip
    from ..utils.checkpoint_io import recorded_config as recorded

    if records_clip(state):
        return []
    given = {k if k.startswith("CONFIG.") else "CONFIG." + k: v
             for k, v in zip(opts[0::2], opts[1::2])}
    clip = {k: v for k, v in checkpoint_clip(state).items() if k not in given}
    if "CONFIG.DATA.CROP_SIZE" in given and "CONFIG.DATA.SHORT_SIDE_SIZE" not in given:
        clip["CONFIG.DATA.SHORT_SIDE_SIZE"] = given["CONFIG.DATA.CROP_SIZE"]  # as a recorded crop
    unknown = [k for k in ("CONFIG.DATA.CLIP_LEN", "CONFIG.DATA.CROP_SIZE")
               if k not in clip and k not in given]
    if unknown:
        name = recorded(state).get("CONFIG", {}).get("MODEL", {}).get("NAME", "its model")
        raise UsageError(
            f"--checkpoint {checkpoint!r} records no clip and {name} has no published input "
            f"to take it from: give {' and '.join(k[len('CONFIG.'):] + ' N' for k in unknown)} "
            "after the videos (the clip the weights were trained on), or --config-file with "
            "the run's config")
    return [str(x) for pair in clip.items() for x in pair]


@command
def main(argv: Optional[List[str]] = None) -> int:
    args = parse_args(argv)
    setup_logger(None, 0, stream=sys.stderr)  # stdout holds the results only
    from ..data import prepare_synthetic
    from ..infer.predictor import Predictor
    from ..utils.checkpoint_io import load_checkpoint

    state = None  # the checkpoint, read once: its config, class names and weights
    with tempfile.TemporaryDirectory() as tmp:
        if not args.config_file:
            state = load_checkpoint(args.checkpoint)
            args.config_file = recorded_config(args.checkpoint, tmp, state)
            args.opts = clip_overrides(args.checkpoint, state, args.opts) + args.opts
        cfg = prepare_synthetic(setup_cfg(args))  # a config given is checked first
    if state is None:
        state = load_checkpoint(args.checkpoint)
    predictor = Predictor(cfg, args.checkpoint, _device(args.device), state)
    del state  # the model holds its weights: the rest (optimizer state) is freed
    # Folders are read once the checkpoint says whether it scores videos or images.
    args.videos = videos_of(args.videos, images=predictor.images)
    results = predictor.predict(args.videos, args.topk, args.window, args.stride)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        _print_text(results)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
