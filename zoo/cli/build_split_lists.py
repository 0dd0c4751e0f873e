"""Turn the official UCF101 or HMDB51 split files into zoo annotation lists.

    zoo-build-split-lists ucf101 --splits ucfTrainTestlist --out lists/ucf101
    zoo-build-split-lists hmdb51 --splits testTrainMulti_7030_splits \\
        --out lists/hmdb51 [--videos /data/hmdb51]

writes ``<out>/train_split<N>.txt`` and ``<out>/val_split<N>.txt`` for N = 1, 2, 3 (gluoncv format:
``Class/video.avi -1 label``, paths relative to the video folder) and ``<out>/classes.txt``. With
--videos, lines whose video is missing are left out and counted. See datasets/ucf101/README.md
and datasets/hmdb51/README.md.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from ..data.lists.annotations import AnnotationError
from ..data.lists.sources import hmdb51_records, ucf101_records, write_classes
from .command import command
from .parser import tool_parser

READERS = {"ucf101": ucf101_records, "hmdb51": hmdb51_records}


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
    read = READERS[args.dataset]
    os.makedirs(args.out, exist_ok=True)
    classes = []
    try:
        for split_id in args.split_ids:
            for name, train in (("train", True), ("val", False)):
                records, classes = read(args.splits, train, split_id)
                if args.videos:
                    kept = [r for r in records if os.path.isfile(os.path.join(args.videos, r.path))]
                    missing = len(records) - len(kept)
                    records = kept
                else:
                    missing = 0
                path = os.path.join(args.out, f"{name}_split{split_id}.txt")
                with open(path, "w", encoding="utf-8") as f:
                    f.writelines(f"{r.path} -1 {r.label}\n" for r in records)
                note = f" ({missing} missing videos left out)" if missing else ""
                print(f"split {split_id} {name}: {len(records)} videos -> {path}{note}")
        write_classes(args.out, classes, required=True)
    except AnnotationError:
        raise
    except ValueError as e:  # a line of classInd.txt or a split file that does not parse
        raise AnnotationError(f"{args.splits}: {e}") from e
    print(f"{len(classes)} classes -> {os.path.join(args.out, 'classes.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
