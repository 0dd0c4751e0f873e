"""``zoo-extract-features`` (``tools/extract_features.py``): write the pooled pre-classifier
features of every video in the validation list, one .npy each.

    zoo-extract-features --config-file i3d_resnet50_v1_feat.yaml [--output DIR] [KEY VALUE ...]
    zoo-extract-features --config-file my.yaml --window 1 [--stride 0.5]   # (W, D) per video

gluoncv.torch's *_feat.yaml configs run unedited; see docs/features.md for the output layout.
The exit code is 1 when a video could not be read (it gets no file; the others get theirs).
"""

from __future__ import annotations

import logging
import sys
from typing import List, Optional

from ..utils.logger import setup_logger
from .command import command
from .configure import setup_cfg
from .parser import default_argument_parser

DESCRIPTION = "Write the pooled pre-classifier features of every video in the validation list."
logger = logging.getLogger("zoo")


@command
def main(argv: Optional[List[str]] = None) -> int:
    parser = default_argument_parser(DESCRIPTION)
    parser.add_argument("--output", default="", metavar="DIR",
                        help="output folder (default: BASE_PATH/EXP_NAME/SAVE_DIR for a "
                        "CONFIG.INFERENCE.FEAT config, else BASE_PATH/EXP_NAME/features)")
    parser.add_argument("--batch-size", type=int, default=0, help="clips per forward")
    parser.add_argument("--window", type=float, default=0.0, metavar="SECONDS",
                        help="one feature row per window of this many seconds (0 = one clip "
                        "per video)")
    parser.add_argument("--stride", type=float, default=0.0, metavar="SECONDS",
                        help="seconds between window starts (0 = --window: side by side)")
    args = parser.parse_args(argv)
    if args.window < 0 or args.stride < 0 or (args.stride and not args.window):
        parser.error(f"--window {args.window:g} --stride {args.stride:g}: both are seconds >= 0, "
                     "and --stride needs --window")
    setup_logger(None, 0)
    cfg = setup_cfg(args)
    from ..infer.features import extract_features, feature_dir

    if args.dry_run:
        from .dry_run import dry_run, print_report

        try:
            result = dry_run(cfg, "features")
        except (TypeError, ValueError) as e:  # the builder refused its arguments
            logger.error("error: model %s cannot be built: %s", cfg.CONFIG.MODEL.NAME, e)
            return 1
        result.notes.append(f"features would go to {feature_dir(cfg, args.output)}")
        print_report(result)
        return 0
    summary = extract_features(cfg, args.output or None, args.batch_size, window=args.window,
                               stride=args.stride)
    # As zoo-predict: the videos that could be read have their files, and the exit code says
    # that some could not.
    return 1 if summary["unreadable"] else 0


if __name__ == "__main__":
    sys.exit(main())
