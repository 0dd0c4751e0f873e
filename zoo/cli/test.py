"""``zoo-test`` (``tools/test_ddp.py``): test a checkpoint with multi-view inference; writes
test_metrics.json and predictions.csv.

    zoo-test --config-file x.yaml [CONFIG.TEST.CHECKPOINT path.pth]

The checkpoint tested is CONFIG.TEST.CHECKPOINT. Left empty (the default) it is the newest
epoch_N.pth (largest N) in the run's checkpoint folder (BASE_PATH/EXP_NAME/checkpoints, or
LOG.CHECKPOINT_DIR), not best.pth: to test the best validation epoch, pass
CONFIG.TEST.CHECKPOINT <that folder>/best.pth. A mid-epoch preempt_*.pth is never picked.
"""

from __future__ import annotations

import sys
from typing import List, Optional

from .command import command
from .job import run

DESCRIPTION = "Evaluate a zoo checkpoint on the test (or validation) list."


@command
def main(argv: Optional[List[str]] = None) -> int:
    from ..infer.tester import set_aside_test_outputs, test_worker  # here: importing stays cheap

    return run(test_worker, DESCRIPTION, argv, splits=("test",),
               set_aside=set_aside_test_outputs, doc=__doc__)


if __name__ == "__main__":
    sys.exit(main())
