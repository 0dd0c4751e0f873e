"""``zoo-convert-config`` (``tools/convert_config.py``): convert another framework's config to a
zoo config.

    zoo-convert-config --from pyslowfast SLOWFAST_8x8_R50.yaml slowfast_8x8.yaml

Prints the model it names, the PySlowFast keys with no zoo counterpart and the values zoo reads
differently; then check the result with ``python tools/train_ddp.py --config-file OUT --dry-run``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import List, Optional

from .command import command
from .parser import tool_parser

DESCRIPTION = "Convert a PySlowFast YAML to a zoo config."


def build_parser() -> argparse.ArgumentParser:
    parser = tool_parser(DESCRIPTION, __doc__)
    parser.add_argument("--from", dest="source", required=True, choices=["pyslowfast"],
                        help="the framework the config comes from")
    parser.add_argument("config", help="the config to convert")
    parser.add_argument("output", help="where to write the zoo YAML")
    return parser


@command
def main(argv: Optional[List[str]] = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if os.path.exists(args.output) and os.path.samefile(args.config, args.output):
        parser.error(f"the output {args.output} is the config to convert: write the zoo YAML to "
                     "another file (the PySlowFast one would be lost)")
    from ..config.convert_pyslowfast import write_converted

    name, unmatched, notes = write_converted(args.config, args.output)
    print(f"wrote {args.output}: CONFIG.MODEL.NAME {name}")
    for note in notes:
        print(f"note: {note}")
    if unmatched:
        print(f"no zoo counterpart (not converted): {', '.join(unmatched)}")
    else:
        print("no zoo counterpart (not converted): none")
    print(f"check it with: python tools/train_ddp.py --config-file {args.output} --dry-run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
