"""Turn Kinetics CSVs (label,youtube_id,time_start,time_end,split) into zoo annotation lists.

    zoo-build-kinetics-lists --videos /data/kinetics400 \\
        --csv kinetics400/train.csv kinetics400/validate.csv --out lists/kinetics400

writes, for each CSV, ``<out>/<csv name>.txt`` (gluoncv format: ``relative/path -1 label``, paths
relative to --videos) and ``<out>/<csv name>_missing.txt`` (the clips with no file), plus one
``<out>/classes.txt`` shared by all (sorted label names of the first CSV: the standard order).
Videos are found by name anywhere under --videos: ``<id>_<start:06d>_<end:06d>.<ext>`` (trimmed
clips, the usual convention), else ``<id>.<ext>`` (untrimmed; then a CSV list with start/end
seconds is written instead, so only the labelled part is read). Every CSV is read before anything
is written: a CSV none of whose videos is found, or a list that would be written over an input
CSV (--out the CSVs' own folder), stops the command with one line. See
datasets/kinetics400/README.md.
"""

from __future__ import annotations

import csv
import os
import sys
from typing import List, Optional

from ..data.lists.sources import index_files, kinetics_records, kinetics_rows, write_classes
from ..utils.errors import UsageError
from .command import command
from .parser import tool_parser


def _refuse_writing_over_inputs(outputs: List[str], csvs: List[str]) -> None:
    """Stops, before anything is written, when a file to be written is one of the input CSVs (an
    untrimmed dataset's ``<out>/train.csv`` with --out the CSVs' own folder)."""
    for out in outputs:
        for csv_path in csvs:
            if os.path.exists(out) and os.path.samefile(out, csv_path):
                raise UsageError(
                    f"the list {out} would be written over the input CSV {csv_path}: give "
                    "another --out folder")


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
    first_rows = kinetics_rows(args.csv[0])
    classes = sorted({row["label"] for row in first_rows})
    index = index_files(args.videos, folders=args.frames)  # one walk of the folder for every CSV
    lists = []  # (csv, list path, records, missing): every CSV is read before anything is written
    for i, csv_path in enumerate(args.csv):
        records, _, missing = kinetics_records(csv_path, args.videos, classes, args.frames,
                                               rows=first_rows if i == 0 else None, index=index)
        name = os.path.splitext(os.path.basename(csv_path))[0]
        trimmed = all(r.start < 0 for r in records)
        list_path = os.path.join(args.out, name + (".txt" if trimmed else ".csv"))
        lists.append((csv_path, list_path, records, missing))
    outputs = [os.path.join(args.out, "classes.txt")]
    for _, list_path, _, _ in lists:
        stem = os.path.splitext(list_path)[0]
        outputs += [list_path, f"{stem}_missing.txt"]
    _refuse_writing_over_inputs(outputs, args.csv)
    os.makedirs(args.out, exist_ok=True)
    for csv_path, list_path, records, missing in lists:
        with open(list_path, "w", encoding="utf-8", newline="") as f:
            if list_path.endswith(".txt"):
                f.writelines(f"{r.path} -1 {r.label}\n" for r in records)
            else:
                writer = csv.writer(f)
                writer.writerow(["path", "label", "start", "end"])
                for r in records:
                    writer.writerow([r.path, r.label, r.start if r.start >= 0 else "",
                                     r.end if r.end >= 0 else ""])
        with open(f"{os.path.splitext(list_path)[0]}_missing.txt", "w", encoding="utf-8") as f:
            f.writelines(f"{stem}\n" for stem in missing)
        print(f"{csv_path}: {len(records)} videos -> {list_path} ({len(missing)} missing)")
    write_classes(args.out, classes, required=True)
    print(f"{len(classes)} classes -> {os.path.join(args.out, 'classes.txt')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
