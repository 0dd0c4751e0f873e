"""``zoo-list-models`` (``tools/list_models.py``): print the registered models with their facts
(params, GFLOPs, frames x stride, crop) and tags.

The plain table's last column lists each model's published-weights tags for MODEL.PRETRAINED
(the first is what PRETRAINED True loads); --weights shows their URLs, formats and hashes.

    zoo-list-models                 # plain table
    zoo-list-models --markdown      # the table of docs/models.md
    zoo-list-models --recount       # measure params / GFLOPs now (marks drift with !)
    zoo-list-models --weights       # published weights: tags, format, hash, URL
                                    # (MODEL.PRETRAINED TAG, or True = marked tag)
    zoo-list-models --aliases       # gluoncv's names and the architecture each builds
"""

from __future__ import annotations

import argparse
import sys
from typing import List, Optional

from ..models.table import (
    alias_rows,
    format_alias_table,
    format_table,
    format_weights_table,
    model_rows,
)
from ..utils.env import import_extra_modules
from .command import command
from .parser import add_extra_modules_argument, tool_parser

DESCRIPTION = ("Print the registered models with their facts (params, GFLOPs, frames x stride, "
               "crop) and tags.")


def build_parser() -> argparse.ArgumentParser:
    parser = tool_parser(DESCRIPTION, __doc__)
    parser.add_argument("names", nargs="*", help="models to list (default: all)")
    parser.add_argument("--markdown", action="store_true", help="print a Markdown table")
    parser.add_argument("--recount", action="store_true",
                        help="count params and GFLOPs now on the meta device")
    parser.add_argument("--weights", action="store_true",
                        help="list the published weights (tags for MODEL.PRETRAINED) instead")
    add_extra_modules_argument(parser, " (their models are listed too)")
    parser.add_argument("--aliases", action="store_true",
                        help="list the aliases (gluoncv's model names) instead of architectures")
    return parser


@command
def main(argv: Optional[List[str]] = None) -> int:
    args = build_parser().parse_args(argv)
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
