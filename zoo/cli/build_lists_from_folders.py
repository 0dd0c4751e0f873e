"""Turn a folder of class sub-folders into zoo annotation lists.

    videos/
      archery/a.mp4, b.mp4 ...
      bowling/c.mp4 ...

    zoo-build-lists-from-folders --root videos --out lists [--val-fraction 0.2]

writes lists/train.txt and lists/val.txt (gluoncv format: ``relative/path -1 label``, paths relative
to --root, -1 = frame count unknown) and lists/classes.txt (class names sorted, line i = class i).

About --val-fraction of each class goes to val. A video's side depends only on its path (or its
--group) and --seed, so adding or removing videos later moves no other video between train and
val: a model trained on the old lists is never validated on its own training videos. A class of
two or more videos (groups) always has one in val and one in train. --group keeps clips cut from
one recording together: ``--group '^(.*)_clip[0-9]+'`` puts ``a/cam1_clip3.mp4`` and
``a/cam1_clip7.mp4`` on the same side, and ``--group '_(g[0-9]+)_'`` does so for UCF101-style
``v_Archery_g08_c01.avi``. CONFIG.DATA.LIST_FORMAT 'auto' (the default) or 'gluoncv' reads the
lists; paths may contain spaces.
"""

from __future__ import annotations

import os
import sys
from typing import List, Optional

from ..data.lists.holdout import GroupPatternError, group_keys, hold_out
from ..data.lists.sources import class_folder_records, write_classes
from ..utils.errors import UsageError
from .command import command
from .parser import tool_parser


@command
def main(argv: Optional[List[str]] = None) -> int:
    p = tool_parser(__doc__.splitlines()[0].strip('"'), doc=__doc__)
    p.add_argument("--root", required=True, help="folder with one sub-folder per class")
    p.add_argument("--out", required=True, help="folder to write train.txt, val.txt, classes.txt")
    p.add_argument("--val-fraction", type=float, default=0.2, help="share of each class for val")
    p.add_argument("--seed", type=int, default=0, help="seed of the train/val split")
    p.add_argument("--group", default=None, metavar="REGEX",
                   help="regular expression searched in each relative path: videos whose match "
                   "(its first capture group, if any) is the same stay on one side of the split")
    args = p.parse_args(argv)
    if not os.path.isdir(args.root):
        raise UsageError(f"--root {args.root!r} is not a folder")
    if not 0 <= args.val_fraction < 1:
        raise UsageError(f"--val-fraction {args.val_fraction} must be in [0, 1)")
    inside = os.path.relpath(os.path.realpath(args.out), os.path.realpath(args.root))
    if inside == os.curdir or not inside.startswith(os.pardir):
        raise UsageError(f"--out {args.out!r} lies inside --root {args.root!r}: the next run would "
                         "read its folder as a class (or its lists as a class's files); write the "
                         "lists beside the videos, e.g. --out "
                         f"{os.path.join(os.path.dirname(os.path.abspath(args.root)), 'lists')}")
    # The same classes and files as training on the folder itself (CONFIG.DATA.TRAIN_ANNO_PATH
    # = the folder): hidden folders and files are passed over.
    records, classes = class_folder_records(args.root)
    records = _without_dangling_links(records, args.root)
    try:
        keys, matched = group_keys([r.path for r in records], args.group)
    except GroupPatternError as e:
        raise UsageError(str(e)) from e
    keys = _same_file_same_side(records, keys, args.root)
    train_records, val_records = hold_out(records, args.val_fraction, args.seed, keys)
    train = [(r.path, r.label) for r in train_records]
    val = [(r.path, r.label) for r in val_records]
    os.makedirs(args.out, exist_ok=True)
    for split, rows in (("train", train), ("val", val)):
        with open(os.path.join(args.out, f"{split}.txt"), "w", encoding="utf-8") as f:
            for path, label in sorted(rows):
                f.write(f"{path} -1 {label}\n")
    write_classes(args.out, classes, required=True)
    print(f"{len(classes)} classes, {len(train)} train / {len(val)} val videos -> {args.out}")
    if args.group:
        print(f"--group matched {matched} of {len(records)} videos (the others are groups of "
              "their own)")
    _name_one_sided(classes, train, val, args.val_fraction)
    return 0


def _without_dangling_links(records, root: str) -> list:
    """The records whose file exists: a symbolic link to nothing is left out, with one line."""
    gone = [r.path for r in records if not os.path.exists(os.path.join(root, r.path))]
    if gone:
        print(f"left out {len(gone)} symbolic link(s) to nothing, e.g. {gone[0]}")
    missing = set(gone)
    return [r for r in records if r.path not in missing]


def _same_file_same_side(records, keys: List[str], root: str) -> List[str]:
    """``keys`` with every file that is a link to another listed file (or its target) in the
    group of the first of them, so that one video is never on both sides of the split."""
    first: dict = {}
    out = list(keys)
    for i, record in enumerate(records):
        real = os.path.realpath(os.path.join(root, record.path))
        j = first.setdefault(real, i)
        out[i] = out[j]
    return out


def _name_one_sided(classes, train, val, fraction: float) -> None:
    """Warn (stderr) about classes with videos on one side only: one video or one group."""
    in_val = {label for _, label in val}
    in_train = {label for _, label in train}
    present = in_val | in_train
    no_val = [c for i, c in enumerate(classes) if fraction > 0 and i in present - in_val]
    no_train = [c for i, c in enumerate(classes) if i in present - in_train]
    for what, names in (("val", no_val), ("train", no_train)):
        if names:
            shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
            print(f"warning: {len(names)} class(es) have no {what} video, as they hold one video "
                  f"(or one --group) only: {shown}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
