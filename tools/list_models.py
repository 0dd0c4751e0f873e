#!/usr/bin/env python
"""Print the registered models with their facts (params, GFLOPs, frames x stride, crop) and tags.

The plain table's last column lists each model's published-weights tags for MODEL.PRETRAINED
(the first is what PRETRAINED True loads); --weights shows their URLs, formats and hashes.

    python tools/list_models.py                 # plain table
    python tools/list_models.py --markdown      # the table of docs/models.md
    python tools/list_models.py --recount       # measure params / GFLOPs now (marks drift with !)
    python tools/list_models.py --weights       # published weights: tags, format, hash, URL
                                                # (MODEL.PRETRAINED TAG, or True = marked tag)
    python tools/list_models.py --aliases       # gluoncv's names and the architecture each builds
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.models.table import (  # noqa: E402
    alias_rows,
    format_alias_table,
    format_table,
    format_weights_table,
    model_rows,
)
from zoo.utils.env import import_extra_modules  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="models to list (default: all)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--recount", action="store_true",
                        help="count params and GFLOPs now on the meta device")
    parser.add_argument("--weights", action="store_true",
                        help="list the published weights (tags for MODEL.PRETRAINED) instead")
    parser.add_argument("--extra-modules", nargs="+", default=[], metavar="PY",
                        help="user model files to import first (their models are listed too)")
    parser.add_argument("--aliases", action="store_true",
                        help="list the aliases (gluoncv's model names) instead of architectures")
    args = parser.parse_args()
    import_extra_modules(args.extra_modules)
    if args.aliases:
        print(format_alias_table(alias_rows(), markdown=args.markdown))
    elif args.weights:
        print(format_weights_table(args.names, markdown=args.markdown))
    else:
        print(format_table(model_rows(args.names, recount=args.recount), markdown=args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
