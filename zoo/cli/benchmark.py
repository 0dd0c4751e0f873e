"""``zoo-benchmark`` (``tools/benchmark.py``): train-step speed, zoo vs PyTorchVideo, DDP scaling,
loader speed, time to start, the GPU check. The code is benchmarks/run.py of the source checkout
(see :mod:`zoo.cli.checkout`); ``zoo-benchmark --help`` lists the sub-commands.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from .checkout import checkout_module
from .command import command


@command
def main(argv: Optional[List[str]] = None) -> int:
    return checkout_module("run").main(argv)


if __name__ == "__main__":
    sys.exit(main())
