"""Turn a folder of class sub-folders into zoo annotation lists.

    videos/
      archery/a.mp4, b.mp4 ...
      bowling/c.mp4 ...

    zoo-build-lists-from-folders --root videos --out lists [--val-fraction 0.2]

writes lists/train.txt and lists/val.txt (gluoncv format: ``relative/path -1 label``, paths relative
to --root, -1 = frame count unknown) and lists/classes.txt (class names sorted, line i = class i).
The split is deterministic: every class contributes the same fraction to val, chosen by --seed.
"""

from __future__ import annotations

import os
import random
import sys
from typing import List, Optional

from ..data.lists.sources import class_folder_records, write_classes
from ..utils.errors import UsageError
from .command import command
from .parser import tool_parser


@command
def main(argv: Optional[List[str]] = None) -> int:
    p = tool_parser(
        __doc__.splitlines()[0].strip('"'),
        epilog="Lists are written in the gluoncv format, one video per line: "
        "'relative/path -1 label' (-1 = frame count unknown; paths may contain spaces); "
        "CONFIG.DATA.LIST_FORMAT "
        "'auto' (the default) or 'gluoncv' reads them.",
    )
    p.add_argument("--root", required=True, help="folder with one sub-folder per class")
    p.add_argument("--out", required=True, help="folder to write train.txt, val.txt, classes.txt")
    p.add_argument("--val-fraction", type=float, default=0.2, help="share of each class for val")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/val split")
    args = p.parse_args(argv)
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root!r} is not a folder")
    if not 0 <= args.val_fraction < 1:
        raise UsageError(f"--val-fraction {args.val_fraction} must be in [0, 1)")
    # The same classes and files as training on the folder itself (CONFIG.DATA.TRAIN_ANNO_PATH
    # = the folder): hidden folders and files are passed over.
    records, classes = class_folder_records(args.root)
    by_class: List[List[str]] = [[] for _ in classes]
    for r in records:
        by_class[r.label].append(r.path)
    rng = random.Random(args.seed)
    train, val = [], []
    for label, files in enumerate(by_class):
        rng.shuffle(files)
        n_val = int(round(len(files) * args.val_fraction))
        val += [(f, label) for f in files[:n_val]]
        train += [(f, label) for f in files[n_val:]]
    os.makedirs(args.out, exist_ok=True)
    for split, rows in (("train", train), ("val", val)):
        with open(os.path.join(args.out, f"{split}.txt"), "w", encoding="utf-8") as f:
            for path, label in sorted(rows):
                f.write(f"{path} -1 {label}\n")
    write_classes(args.out, classes, required=True)
    print(f"{len(classes)} classes, {len(train)} train / {len(val)} val videos -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
