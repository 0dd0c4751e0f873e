#!/usr/bin/env python
"""Convert a PySlowFast / PyTorchVideo / MMAction2 / torchvision checkpoint into a zoo checkpoint.

    python tools/convert_checkpoint.py --from pyslowfast --model slowfast_8x8_resnet50 \\
        SLOWFAST_8x8_R50.pyth slowfast_8x8_resnet50_k400.pth
    python tools/convert_checkpoint.py --from mmaction2 --model slowfast_4x16_resnet50 \\
        --kwargs fuse_norm_act False slowfast_r50_4x16.pth out.pth
    python tools/convert_checkpoint.py --from torchvision --model i3d_resnet50 resnet50.pth i3d.pth

The same command as ``zoo-convert-checkpoint``; its code (and the full help) is
zoo/cli/convert_checkpoint.py.
"""

import sys

try:
    from zoo.cli.convert_checkpoint import main
except ModuleNotFoundError as e:  # zoo not installed, or an install without zoo.cli
    if e.name not in ("zoo", "zoo.cli"):
        raise
    sys.exit(f"error: {e}: install zoo first (pip install -e . in the checkout; see README.md)")

if __name__ == "__main__":
    sys.exit(main())
