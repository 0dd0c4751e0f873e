"""``zoo-benchmark-data`` (``tools/benchmark_data.py``): decoding speed and memory of each reader,
and end-to-end clip loading. The code is benchmarks/run_data.py of the source checkout (see
:mod:`zoo.cli.checkout`); ``zoo-benchmark-data --help`` lists the options.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from .checkout import checkout_module
from .command import command


@command
def main(argv: Optional[List[str]] = None) -> int:
    return checkout_module("run_data").main(argv)


if __name__ == "__main__":
    sys.exit(main())
