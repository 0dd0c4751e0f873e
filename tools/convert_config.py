#!/usr/bin/env python
"""Convert another framework's config to a zoo config.

    python tools/convert_config.py --from pyslowfast SLOWFAST_8x8_R50.yaml slowfast_8x8.yaml

Prints the model it names, the PySlowFast keys with no zoo counterpart and the values zoo reads
differently; then check the result with ``python tools/train_ddp.py --config-file OUT --dry-run``.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from zoo.config import ConfigError  # noqa: E402
from zoo.config.convert_pyslowfast import write_converted  # noqa: E402


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description="Convert a PySlowFast YAML to a zoo config.")
    parser.add_argument("--from", dest="source", required=True, choices=["pyslowfast"],
                        help="the framework the config comes from")
    parser.add_argument("config", help="the config to convert")
    parser.add_argument("output", help="where to write the zoo YAML")
    args = parser.parse_args(argv)
    try:
        name, unmatched, notes = write_converted(args.config, args.output)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
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
