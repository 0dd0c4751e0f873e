"""``zoo-export`` (``tools/export.py``): export a registered model to TorchScript and/or ONNX and
check each export against eager.

    zoo-export --model slowfast_4x16_resnet50 --pretrained sf.pth --out exported/
    zoo-export --model slowfast_4x16_resnet50 --format onnx \\
        --kwargs width 8 depth 18 --input-shape 1 3 16 32 32 --out /tmp/sf_small

The example input defaults to batch 1 at the clip the model is built for: its --kwargs (or a
checkpoint's recorded MODEL.KWARGS) frames / crop_size where the model takes them (MViT,
VideoMAE), else the clip a zoo run's checkpoint was trained on, else the model's facts (frames,
crop); the exported graph keeps its T, H, W and a free batch axis. Exit status 1 when an export
differs from eager by more than --atol + --rtol x max |logit|.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from typing import List, Optional

from ..infer.export import FORMATS, export_model
from ..models import parse_model_kwargs
from ..utils.env import import_extra_modules
from .command import command
from .parser import add_extra_modules_argument, check_pairs, tool_parser

DESCRIPTION = "Export a registered model to TorchScript and/or ONNX and check each against eager."


def build_parser() -> argparse.ArgumentParser:
    parser = tool_parser(DESCRIPTION, __doc__)
    parser.add_argument("--model", default=None,
                        help="registered model name (default: the one a zoo run's checkpoint in "
                        "--pretrained records)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--format", choices=[*FORMATS, "all"], default="all")
    parser.add_argument("--num-classes", type=int, default=None,
                        help="classifier size (default: that of the classifier in "
                        "--pretrained (a zoo run's checkpoint, another project's file or "
                        "folder), else the model's, e.g. 400 for Kinetics-400 models)")
    parser.add_argument("--pretrained", default=None,
                        help="weights to load: a zoo run's checkpoint (its model, kwargs, class "
                        "count and EMA weights are used), another project's file, a tag or a URL")
    parser.add_argument("--kwargs", nargs="+", default=[], metavar="KEY VALUE",
                        help="builder arguments as KEY VALUE pairs")
    parser.add_argument("--input-shape", nargs="+", type=int, default=None, metavar="N",
                        help="example input shape, e.g. 1 3 32 224 224 (default: the clip "
                        "the --kwargs frames / crop_size build the model for, else its facts)")
    parser.add_argument("--atol", type=float, default=1e-4,
                        help="accepted max |exported - eager| (plus --rtol x max |logit|)")
    parser.add_argument("--rtol", type=float, default=1e-5,
                        help="accepted difference per unit of the largest eager logit")
    parser.add_argument("--no-verify", action="store_true", help="skip running the exports")
    add_extra_modules_argument(parser)
    return parser


@command
def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    check_pairs(parser, "--kwargs", args.kwargs)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import_extra_modules(args.extra_modules)
    formats = FORMATS if args.format == "all" else (args.format,)
    results = export_model(
        args.model, args.out, formats, num_classes=args.num_classes,
        pretrained=args.pretrained, input_shape=args.input_shape,
        verify=not args.no_verify, atol=args.atol, rtol=args.rtol,
        model_kwargs=parse_model_kwargs(args.kwargs))
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
