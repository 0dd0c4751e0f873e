"""Turn the official UCF101 or HMDB51 split files into zoo annotation lists.

    zoo-build-split-lists ucf101 --splits ucfTrainTestlist --out lists/ucf101
    zoo-build-split-lists hmdb51 --splits testTrainMulti_7030_splits \\
        --out lists/hmdb51 [--videos /data/hmdb51]

writes ``<out>/train_split<N>.txt`` and ``<out>/val_split<N>.txt`` for N = 1, 2, 3 (gluoncv format:
``Class/video.avi -1 label``, paths relative to the video folder) and ``<out>/classes.txt``. With
--videos, lines whose video is missing are left out and counted; a video the folder holds as the
``.mp4`` zoo-reencode writes for it (``Class/video.mp4``, as the datasets read it) is listed by
that name. A folder that holds none of the videos stops the command before anything is written. See
datasets/ucf101/README.md and datasets/hmdb51/README.md.
"""

from __future__ import annotations

import os
import sys
from dataclasses import replace
from typing import List, Optional

from ..data.lists.annotations import AnnotationError
from ..data.lists.records import VIDEO_EXTS, VideoRecord, local_path, reencoded_name
from ..data.lists.sources import hmdb51_records, ucf101_records, visible_walk, write_classes
from ..utils.errors import UsageError
from .command import command
from .parser import tool_parser

READERS = {"ucf101": ucf101_records, "hmdb51": hmdb51_records}


def _found(records: List[VideoRecord], videos: str) -> List[VideoRecord]:
    """The records whose video is under ``videos``: the file the split names, else the ``.mp4``
    that ``zoo-reencode`` writes for it (:func:`~zoo.data.lists.records.reencoded_name`, the
    name the datasets read in a re-encoded folder), which the record then names."""
    kept = []
    for r in records:
        for path in (r.path, reencoded_name(r.path)):
            if os.path.isfile(local_path(videos, path)):
                kept.append(replace(r, path=path))
                break
    return kept


def _none_found(videos: str, records: List[VideoRecord]) -> AnnotationError:
    """The error for a video folder that holds none of the videos of the splits: the folder, a
    video file it holds, and the names looked for."""
    held = next((os.path.relpath(os.path.join(folder, f), videos)
                 for folder, _, files in visible_walk(videos) for f in files
                 if f.lower().endswith(VIDEO_EXTS)), None)
    held = f"it holds e.g. {held!r}" if held else "it holds no video files"
    return AnnotationError(
        f"--videos {videos!r} holds none of the videos of the split files ({held}; looked for: "
        f"<Class>/<video> as the split files name them, e.g. {records[0].path!r}, or its .mp4 "
        "as zoo-reencode writes it): give the folder that holds the class folders")


@command
def main(argv: Optional[List[str]] = None) -> int:
    p = tool_parser(
        __doc__.splitlines()[0].strip('"'),
        epilog="Lists are written in the gluoncv format, one video per line: "
        "'relative/path -1 label' (-1 = frame count unknown; paths may contain spaces); "
        "CONFIG.DATA.LIST_FORMAT "
        "'auto' (the default) or 'gluoncv' reads them.",
    )
    p.add_argument("dataset", choices=sorted(READERS))
    p.add_argument("--splits", required=True,
                   help="ucfTrainTestlist (UCF101) or testTrainMulti_7030_splits (HMDB51) folder")
    p.add_argument("--out", required=True, help="folder for the lists and classes.txt")
    p.add_argument("--videos", default="", help="video folder: leave out missing videos")
    p.add_argument("--split-ids", type=int, nargs="+", default=[1, 2, 3], choices=[1, 2, 3])
    args = p.parse_args(argv)
    if args.videos and not os.path.isdir(args.videos):
        raise UsageError(f"--videos {args.videos!r} is not a folder")
    read = READERS[args.dataset]
    classes = []
    lists = []  # (split id, name, records, those found): all are read before any is written
    try:
        for split_id in args.split_ids:
            for name, train in (("train", True), ("val", False)):
                records, classes = read(args.splits, train, split_id)
                kept = _found(records, args.videos) if args.videos else records
                lists.append((split_id, name, records, kept))
    except AnnotationError:
        raise
    except ValueError as e:  # a line of classInd.txt or a split file that does not parse
        raise AnnotationError(f"{args.splits}: {e}") from e
    listed = [r for _, _, records, _ in lists for r in records]
    if args.videos and listed and not any(kept for _, _, _, kept in lists):
        raise _none_found(args.videos, listed)
    os.makedirs(args.out, exist_ok=True)
    for split_id, name, records, kept in lists:
        path = os.path.join(args.out, f"{name}_split{split_id}.txt")
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"{r.path} -1 {r.label}\n" for r in kept)
        missing = len(records) - len(kept)
        note = f" ({missing} missing videos left out)" if missing else ""
        print(f"split {split_id} {name}: {len(kept)} videos -> {path}{note}")
    write_classes(args.out, classes, required=True)
    print(f"{len(classes)} classes -> {os.path.join(args.out, 'classes.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
