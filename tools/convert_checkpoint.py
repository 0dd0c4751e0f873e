#!/usr/bin/env python
"""Convert a PySlowFast / PyTorchVideo / MMAction2 / torchvision checkpoint into a zoo checkpoint.

    python tools/convert_checkpoint.py --from pyslowfast --model slowfast_8x8_resnet50 \\
        SLOWFAST_8x8_R50.pyth slowfast_8x8_resnet50_k400.pth
    python tools/convert_checkpoint.py --from mmaction2 --model slowfast_4x16_resnet50 \\
        --kwargs fuse_norm_act False slowfast_r50_4x16.pth out.pth
    python tools/convert_checkpoint.py --from torchvision --model i3d_resnet50 resnet50.pth i3d.pth

Every source tensor must be used and every zoo tensor filled, or nothing is written and the
error names the keys. Then train or test with CONFIG.MODEL.PRETRAINED OUT (any class count).
"""

import argparse
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.models import parse_model_kwargs  # noqa: E402
from zoo.models.convert import SCHEMES, ConversionError, convert_checkpoint  # noqa: E402
from zoo.utils.env import import_extra_modules  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 2)[2])
    parser.add_argument("--from", dest="scheme", required=True, choices=sorted(SCHEMES),
                        help="the project that wrote the checkpoint")
    parser.add_argument("--model", required=True, help="registered zoo model to convert to")
    parser.add_argument("--kwargs", nargs="+", default=[], metavar="KEY VALUE",
                        help="builder arguments the source architecture needs, as KEY VALUE "
                        "pairs (recorded in the checkpoint's cfg as MODEL.KWARGS)")
    parser.add_argument("--unsafe-load", action="store_true",
                        help="unpickle the source fully (runs code in the file; trusted files "
                        "only), for files torch.load(weights_only=True) refuses")
    parser.add_argument("--extra-modules", nargs="+", default=[], metavar="PY",
                        help="user model files to import first")
    parser.add_argument("src", help="source checkpoint")
    parser.add_argument("out", help="zoo checkpoint to write")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        import_extra_modules(args.extra_modules)
        report = convert_checkpoint(args.src, args.out, args.scheme, args.model,
                                    parse_model_kwargs(args.kwargs),
                                    allow_pickle=args.unsafe_load)
    except (ConversionError, FileNotFoundError, KeyError, ValueError) as e:
        print(f"convert_checkpoint.py: error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {args.out} ({report.num_target} tensors)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
