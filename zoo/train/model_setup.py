"""The model as a training process runs it: built from the registry, frozen where the config says,
laid out and routed for the device, compiled, and wrapped in DDP or sharded with FSDP2
(:func:`prepare_model`); the trainer and the benchmarks build theirs here."""

from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, Optional, Sequence

import torch
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel

from ..accel import apply_cpu_kernels, pad_stems, register_compression
from ..config import ConfigError
from ..models import build_model
from ..utils import comm
from .execution import Execution, apply_cudnn_benchmark, compile_model, resolve_execution
from .finetune import check_classifier_guess, freeze_backbone, freeze_bn
from .precision import execution_settings, memory_format
from .sharding import shard_model
from .sync_bn import convert_sync_bn


def prepare_model(cfg, device: torch.device, logger: logging.Logger,
                  execution: Optional[Execution] = None, classes: Sequence[str] = ()) -> nn.Module:
    """Build the model, apply freezing / SyncBN / execution settings, move it, and wrap it in
    DDP or shard it with FSDP2 (``DDP_CONFIG.STRATEGY``; with one process it stays bare).

    ``execution`` is the run's :class:`~zoo.train.execution.Execution` (compile, cuDNN
    benchmark, stem padding); None resolves ``CONFIG.TRAIN`` without an epoch length, which
    keeps ``COMPILE auto`` off."""
    if execution is None:
        execution = run_execution(cfg, device)
    model = build_model(cfg, classes)
    check_classifier_guess(cfg, model)
    if cfg.CONFIG.MODEL.FREEZE_BACKBONE:
        logger.info("froze %d backbone tensors; training the head only",
                    len(freeze_backbone(model)))
    if cfg.CONFIG.MODEL.FREEZE_BN:
        logger.info("froze %d BatchNorm layers", freeze_bn(model))
    if cfg.CONFIG.TRAIN.SYNC_BN and comm.get_world_size() > 1:
        model = convert_sync_bn(model, device)
    if cfg.CONFIG.TRAIN.ACT_CHECKPOINT:
        enable_act_checkpoint(model, cfg.CONFIG.MODEL.NAME)
    model.to(device)
    _, channels_last = execution_settings(cfg.CONFIG.TRAIN, device)
    apply_execution(model, device, channels_last, route_convs=cfg.CONFIG.TRAIN.CPU_KERNELS,
                    stem_pad=execution.stem_pad)
    apply_cudnn_benchmark(execution, device)
    compile_model(model, execution)  # in place: the module and its state-dict keys stay
    if cfg.DDP_CONFIG.STRATEGY == "fsdp":
        if comm.get_world_size() == 1:
            logger.info("DDP_CONFIG.STRATEGY fsdp with one process: training unsharded")
            return model
        return shard_model(model, device, cfg.DDP_CONFIG.FSDP_CPU_OFFLOAD, logger)
    if comm.get_world_size() == 1:
        return model
    ids = [device.index] if device.type == "cuda" else None
    # No buffer broadcast before every forward (see hooks.broadcast_buffers); gradients all-reduce
    # straight from the buckets they live in. torch >= 2.14 names the switch
    # forward_sync_buffers (it still syncs buffers once at construction, which is harmless here).
    no_sync = ({"forward_sync_buffers": False} if "forward_sync_buffers" in _DDP_ARGS
               else {"broadcast_buffers": False})
    ddp = DistributedDataParallel(model, device_ids=ids, gradient_as_bucket_view=True,
                                  **no_sync, **ddp_options(cfg))
    register_compression(ddp, cfg)
    kind = cfg.DDP_CONFIG.GRAD_COMPRESSION
    if kind != "none":
        extra = (f" (rank {cfg.DDP_CONFIG.POWERSGD_RANK}, from step "
                 f"{cfg.DDP_CONFIG.POWERSGD_START_STEP})" if kind == "powersgd" else "")
        logger.info("gradients all-reduced with %s compression%s", kind, extra)
    return ddp


_DDP_ARGS = inspect.signature(DistributedDataParallel.__init__).parameters


def enable_act_checkpoint(model: nn.Module, name: str) -> None:
    """CONFIG.TRAIN.ACT_CHECKPOINT: the model's ``set_grad_checkpointing(True)`` (timm's
    convention; every zoo family with blocks has it)."""
    if not callable(getattr(model, "set_grad_checkpointing", None)):
        raise ConfigError(f"CONFIG.TRAIN.ACT_CHECKPOINT True: model {name} has no "
                          "set_grad_checkpointing(); set ACT_CHECKPOINT False")
    model.set_grad_checkpointing(True)


def ddp_options(cfg) -> Dict[str, Any]:
    """Keyword arguments for :class:`DistributedDataParallel` from ``DDP_CONFIG`` and
    ``CONFIG.TRAIN.FIND_UNUSED_PARAMETERS``."""
    return {"bucket_cap_mb": float(cfg.DDP_CONFIG.BUCKET_CAP_MB),
            "find_unused_parameters": bool(cfg.CONFIG.TRAIN.FIND_UNUSED_PARAMETERS)}


def run_execution(cfg, device: torch.device, iters_per_epoch: Optional[int] = None
                  ) -> Execution:
    """The :class:`~zoo.train.execution.Execution` of a run of ``cfg`` on ``device``."""
    world = comm.get_world_size()
    return resolve_execution(cfg.CONFIG.TRAIN, device, world, iters_per_epoch,
                             sharded=cfg.DDP_CONFIG.STRATEGY == "fsdp" and world > 1)


def apply_execution(model: nn.Module, device: torch.device, channels_last: bool,
                    route_convs: bool = True, route_stems: bool = True,
                    stem_pad: bool = False) -> int:
    """Put ``model`` (already on ``device``) in the layout zoo trains it in; on CPU, with
    ``route_convs``, route the conv3d layers to the kernels zoo picks for them and the narrow RGB
    stems to float32 under bf16 autocast (zoo/accel; ``route_stems=False`` leaves the stems);
    with ``stem_pad``, pad the RGB stem convs' input to 8 channels (on CUDA: tensor cores).

    Returns the number of conv3d layers that may be routed.
    """
    if channels_last:
        dim = 5 if any(isinstance(m, nn.Conv3d) for m in model.modules()) else 4
        model.to(memory_format=memory_format(dim))
    routed = 0
    if route_convs and device.type == "cpu":
        routed = apply_cpu_kernels(model, stems=route_stems)
    if stem_pad:
        pad_stems(model)  # after the CPU routes: a routed conv keeps its route
    return routed
