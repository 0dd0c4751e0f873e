"""Train zoo on SageMaker: 2 instances x 8 GPUs, managed spot training, checkpoints synced to S3.

    pip install sagemaker
    python examples/sagemaker/estimator.py --role arn:aws:iam::123456789012:role/SageMaker \
        --image 123456789012.dkr.ecr.us-east-1.amazonaws.com/zoo:latest \
        --data s3://my-bucket/kinetics400 --checkpoints s3://my-bucket/zoo/checkpoints

The image is one with zoo installed (``pip install zoo``; SageMaker's PyTorch training images plus
zoo, or your own). With ``distribution={"torch_distributed": {"enabled": True}}`` SageMaker runs
the entry point under torchrun on every instance (``torchrun --nnodes N --nproc_per_node GPUs
--master_addr algo-1 --node_rank i entry``), so each process is one rank of the job, as under
any torchrun (docs/multi_node.md, "SageMaker"). It also sets ``SM_CURRENT_HOST``, ``SM_HOSTS``,
``SM_NUM_GPUS``, ``SM_CHANNEL_<NAME>``..., and zoo, seeing ``SM_CURRENT_HOST``, writes its
checkpoints to ``/opt/ml/checkpoints`` (unless ``CONFIG.LOG.CHECKPOINT_DIR`` says otherwise).

Managed spot training: SageMaker syncs ``checkpoint_local_path`` (``/opt/ml/checkpoints``) to
``checkpoint_s3_uri`` while the job runs and copies it back when an interrupted job starts again,
so ``TRAIN.AUTO_RESUME True`` (set by train_entry.py) continues from the newest checkpoint. Logs and
metrics go to ``SM_OUTPUT_DATA_DIR`` (uploaded with the job's output).
"""

from __future__ import annotations

import argparse


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--role", required=True, help="the SageMaker execution role's ARN")
    p.add_argument("--image", required=True, help="a training image with zoo installed")
    p.add_argument("--data", required=True, help="S3 prefix of the videos and lists")
    p.add_argument("--checkpoints", required=True, help="S3 prefix for the checkpoints")
    p.add_argument("--config-file", default="configs/kinetics400/slowfast_4x16_resnet50.yaml")
    p.add_argument("--instances", type=int, default=2)
    p.add_argument("--instance-type", default="ml.p4d.24xlarge")
    args = p.parse_args()

    from sagemaker.pytorch import PyTorch

    estimator = PyTorch(
        entry_point="examples/sagemaker/train_entry.py",  # tools/train_ddp.py + the channel
        source_dir=".",  # the zoo checkout (configs/, examples/)
        image_uri=args.image,
        role=args.role,
        instance_count=args.instances,
        instance_type=args.instance_type,
        distribution={"torch_distributed": {"enabled": True}},  # torchrun on every instance
        # Managed spot training: interrupted jobs start again, up to max_wait seconds in all.
        use_spot_instances=True,
        max_run=24 * 3600,
        max_wait=48 * 3600,
        # Synced to S3 during the job and copied back on a restart; zoo writes here by itself.
        checkpoint_s3_uri=args.checkpoints,
        checkpoint_local_path="/opt/ml/checkpoints",
        # Passed to the entry point as --config-file FILE.
        hyperparameters={"config-file": args.config_file},
    )
    estimator.fit({"training": args.data})


if __name__ == "__main__":
    main()
