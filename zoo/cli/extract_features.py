"""``zoo-extract-features`` (``tools/extract_features.py``): write the pooled pre-classifier
features of every video in the validation list, one .npy each.

    zoo-extract-features --config-file i3d_resnet50_v1_feat.yaml [--output DIR] [KEY VALUE ...]

gluoncv.torch's *_feat.yaml configs run unedited; see docs/features.md for the output layout.
"""

from __future__ import annotations

import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> int:
    from ..infer.features import extract_main

    return extract_main(argv)


if __name__ == "__main__":
    sys.exit(main())
