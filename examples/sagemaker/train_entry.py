"""The entry point SageMaker runs under torchrun on every instance (see estimator.py):
``tools/train_ddp.py`` with the data of the ``training`` channel and the logs in SageMaker's
output folder. Arguments (SageMaker passes the hyperparameters as ``--key value``) come first;
``KEY VALUE`` config overrides may follow them.

Checkpoints need nothing here: with ``SM_CURRENT_HOST`` set, zoo writes them to
``/opt/ml/checkpoints``, the folder SageMaker syncs to ``checkpoint_s3_uri``.
"""

import os
import sys

from zoo.cli.train import main

overrides = []
data = os.environ.get("SM_CHANNEL_TRAINING")  # the "training" channel, copied from S3
if data:
    overrides += ["CONFIG.DATA.TRAIN_ANNO_PATH", os.path.join(data, "train.txt"),
                  "CONFIG.DATA.TRAIN_DATA_PATH", os.path.join(data, "train"),
                  "CONFIG.DATA.VAL_ANNO_PATH", os.path.join(data, "val.txt"),
                  "CONFIG.DATA.VAL_DATA_PATH", os.path.join(data, "val")]
if os.environ.get("SM_OUTPUT_DATA_DIR"):  # uploaded to S3 with the job's output
    overrides += ["CONFIG.LOG.BASE_PATH", os.environ["SM_OUTPUT_DATA_DIR"]]
# Resuming is what a restarted spot job is for.
overrides += ["CONFIG.TRAIN.AUTO_RESUME", "True"]

sys.exit(main(sys.argv[1:] + overrides))
