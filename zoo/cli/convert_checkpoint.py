"""``zoo-convert-checkpoint`` (``tools/convert_checkpoint.py``): convert a PySlowFast /
PyTorchVideo / MMAction2 / torchvision / gluoncv.torch / Hugging Face checkpoint into a zoo
checkpoint.

    zoo-convert-checkpoint --from pyslowfast --model slowfast_8x8_resnet50 \\
        SLOWFAST_8x8_R50.pyth slowfast_8x8_resnet50_k400.pth
    zoo-convert-checkpoint --from mmaction2 --model slowfast_4x16_resnet50 \\
        --kwargs fuse_norm_act False slowfast_r50_4x16.pth out.pth
    zoo-convert-checkpoint --from torchvision --model i3d_resnet50 resnet50.pth i3d.pth
    zoo-convert-checkpoint --from huggingface --model videomae_vit_b \
        videomae-base-finetuned-kinetics/ videomae_vit_b_k400.pth

Every source tensor must be used and every zoo tensor filled, or nothing is written and the
error names the keys. Then train or test with CONFIG.MODEL.PRETRAINED OUT (any class count).
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import List, Optional

from ..models import parse_model_kwargs
from ..models.weights.convert import SCHEMES, convert_checkpoint
from ..utils.env import import_extra_modules
from .command import command
from .parser import add_extra_modules_argument, check_pairs, positionals_after_pairs, tool_parser

DESCRIPTION = ("Convert a PySlowFast / PyTorchVideo / MMAction2 / torchvision / gluoncv.torch / "
               "Hugging Face checkpoint (a file, .safetensors too, or a Hub folder) into a zoo "
               "checkpoint.")


def build_parser() -> argparse.ArgumentParser:
    parser = tool_parser(DESCRIPTION, __doc__)
    parser.add_argument("--from", dest="scheme", required=True, choices=sorted(SCHEMES),
                        help="the project that wrote the checkpoint")
    parser.add_argument("--model", required=True, help="registered zoo model to convert to")
    parser.add_argument("--kwargs", nargs="+", default=[], metavar="KEY VALUE",
                        help="builder arguments the source architecture needs, as KEY VALUE "
                        "pairs (recorded in the checkpoint's cfg as MODEL.KWARGS)")
    parser.add_argument("--unsafe-load", action="store_true",
                        help="unpickle the source fully (runs code in the file; trusted files "
                        "only), for files torch.load(weights_only=True) refuses")
    add_extra_modules_argument(parser)
    # Optional to argparse only: --kwargs, given before them, takes them along (see main).
    parser.add_argument("src", nargs="?",
                        help="source checkpoint (a file, or a Hugging Face Hub folder)")
    parser.add_argument("out", nargs="?", help="zoo checkpoint to write")
    return parser


@command
def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    positionals_after_pairs(parser, args, "kwargs", ("src", "out"))
    check_pairs(parser, "--kwargs", args.kwargs)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    import_extra_modules(args.extra_modules)
    report = convert_checkpoint(args.src, args.out, args.scheme, args.model,
                                parse_model_kwargs(args.kwargs), allow_pickle=args.unsafe_load)
    print(f"wrote {args.out} ({report.num_target} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
