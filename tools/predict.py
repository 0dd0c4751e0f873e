#!/usr/bin/env python
"""Print the top-5 classes of video files with a trained checkpoint.

The model (name, kwargs, class count) is the checkpoint's; MODEL.PRETRAINED is not read.

    python tools/predict.py --config-file x.yaml --checkpoint ckpt.pth a.mp4 b.mp4 [--json] \
        [--opts KEY VALUE ...]
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.data import prepare_synthetic  # noqa: E402
from zoo.engine.cli import setup_cfg  # noqa: E402
from zoo.engine.errors import report_failure  # noqa: E402
from zoo.engine.predictor import Predictor  # noqa: E402
from zoo.utils.logger import setup_logger  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config-file", required=True, help="the run's YAML config")
    p.add_argument("--checkpoint", required=True, help="zoo checkpoint (.pth)")
    p.add_argument("--extra-modules", action="append", default=[], help="user model files")
    p.add_argument("--topk", type=int, default=5, help="classes to show per video")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    p.add_argument("--opts", nargs="*", default=[],
                   help="KEY VALUE config overrides (after the videos)")
    p.add_argument("videos", nargs="+", help="video files")
    args = p.parse_args(argv)
    setup_logger(None, 0, stream=sys.stderr)  # stdout holds the results only
    try:
        cfg = prepare_synthetic(setup_cfg(argparse.Namespace(
            config_file=args.config_file, opts=args.opts, extra_modules=args.extra_modules)))
        results = Predictor(cfg, args.checkpoint).predict(args.videos, args.topk)
    except Exception as e:  # one `error:` line (zoo/engine/errors.py)
        return report_failure(e)
    if args.json:
        print(json.dumps(results, indent=2))
    else:
        for r in results:
            if "error" in r:
                print(f"{r['video']}: ERROR {r['error']}")
                continue
            print(r["video"])
            for i, t in enumerate(r["top"], 1):
                print(f"  {i}. {t['name']:<24} {t['prob']:.4f}")
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
