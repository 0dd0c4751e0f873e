#!/usr/bin/env python
"""Write the pooled pre-classifier features of every video in the validation list, one .npy each.

    python tools/extract_features.py --config-file i3d_resnet50_v1_feat.yaml [--output DIR]

gluoncv.torch's *_feat.yaml configs run unedited; see docs/features.md for the output layout.
"""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.engine.features import extract_main  # noqa: E402

if __name__ == "__main__":
    sys.exit(extract_main())
