"""Turn Kinetics CSVs (label,youtube_id,time_start,time_end,split) into zoo annotation lists.

    zoo-build-kinetics-lists --videos /data/kinetics400 \\
        --csv kinetics400/train.csv kinetics400/validate.csv --out lists/kinetics400

writes, for each CSV, ``<out>/<csv name>.txt`` (gluoncv format: ``relative/path -1 label``, paths
relative to --videos) and ``<out>/<csv name>_missing.txt`` (the clips with no file), plus one
``<out>/classes.txt`` shared by all (sorted label names of the first CSV: the standard order).
Videos are found by name anywhere under --videos: ``<id>_<start:06d>_<end:06d>.<ext>`` (trimmed
clips, the usual convention), else ``<id>.<ext>`` (untrimmed; then a CSV list with start/end
seconds is written instead, so only the labelled part is read). See datasets/kinetics400/README.md.
"""

from __future__ import annotations

import csv
import os
import sys
from typing import List, Optional

from ..data.lists.annotations import AnnotationError
from ..data.lists.records import open_text
from ..data.lists.sources import kinetics_records, write_classes
from ..utils.errors import UsageError
from .command import command
from .parser import tool_parser


def _sorted_labels(csv_path: str) -> list:
    with open_text(csv_path, newline="") as f:
        try:
            return sorted({row["label"].strip() for row in csv.DictReader(f)})
        except KeyError:
            raise AnnotationError(f"{csv_path}: no 'label' column (the test split has no "
                                  "labels and cannot be used)") from None


@command
def main(argv: Optional[List[str]] = None) -> int:
    p = tool_parser(
        __doc__.splitlines()[0].strip('"'),
        epilog="Lists are written in the gluoncv format, one video per line: "
        "'relative/path -1 label' (-1 = frame count unknown; paths may contain spaces); "
        "CONFIG.DATA.LIST_FORMAT "
        "'auto' (the default) or 'gluoncv' reads them. "
        "Untrimmed videos get a CSV list with a header (path,label,start,end) instead.",
    )
    p.add_argument("--csv", nargs="+", required=True, help="Kinetics CSV file(s); first = train")
    p.add_argument("--videos", required=True, help="folder holding the videos (any layout)")
    p.add_argument("--out", required=True, help="folder for the lists and classes.txt")
    p.add_argument("--frames", action="store_true",
                   help="the videos are folders of extracted frames named like the clips")
    args = p.parse_args(argv)
    if not os.path.isdir(args.videos):
        raise UsageError(f"--videos {args.videos!r} is not a folder")
    classes = _sorted_labels(args.csv[0])
    os.makedirs(args.out, exist_ok=True)
    for csv_path in args.csv:
        records, _, missing = kinetics_records(csv_path, args.videos, classes, args.frames)
        name = os.path.splitext(os.path.basename(csv_path))[0]
        trimmed = all(r.start < 0 for r in records)
        list_path = os.path.join(args.out, name + (".txt" if trimmed else ".csv"))
        with open(list_path, "w", encoding="utf-8", newline="") as f:
            if trimmed:
                f.writelines(f"{r.path} -1 {r.label}\n" for r in records)
            else:
                writer = csv.writer(f)
                writer.writerow(["path", "label", "start", "end"])
                for r in records:
                    writer.writerow([r.path, r.label, r.start if r.start >= 0 else "",
                                     r.end if r.end >= 0 else ""])
        with open(os.path.join(args.out, f"{name}_missing.txt"), "w", encoding="utf-8") as f:
            f.writelines(f"{stem}\n" for stem in missing)
        print(f"{csv_path}: {len(records)} videos -> {list_path} ({len(missing)} missing)")
    write_classes(args.out, classes, required=True)
    print(f"{len(classes)} classes -> {os.path.join(args.out, 'classes.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
