"""Start the processes of one job and join them into a process group.

``launch(main_func, cfg)`` is called on every node with the same config. It works out this node's
share of the job (``resolve_topology``), spawns one worker per GPU (or ``NUM_CPU_PROCS`` CPU workers),
and in each worker fills in ``GPU_WORLD_SIZE`` / ``GPU_WORLD_RANK`` / ``GPU``, initialises the
process group with a timeout, then calls ``main_func(cfg)``. With ``DISTRIBUTED False`` it is a plain
call in this process with no process group.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from dataclasses import dataclass
from typing import Any, Callable
from urllib.parse import urlparse

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..utils.env import available_cpus, set_num_threads

logger = logging.getLogger(__name__)


class LaunchError(RuntimeError):
    """The job's topology cannot be worked out or started; the message says what to change."""


@dataclass
class Topology:
    """This node's part of the job."""

    num_nodes: int
    node_rank: int
    local_procs: int  # worker processes on this node
    world_size: int  # processes in the whole job
    rank_offset: int  # global rank of this node's first process
    dist_url: str
    backend: str
    use_cuda: bool


def _port_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve_topology(cfg) -> Topology:
    """Work out node rank, process counts and the rendezvous URL from DDP_CONFIG."""
    ddp = cfg.DDP_CONFIG
    use_cuda = torch.cuda.is_available()
    local_procs = torch.cuda.device_count() if use_cuda else ddp.NUM_CPU_PROCS
    backend = ddp.DIST_BACKEND
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"
    if backend == "nccl" and not use_cuda:
        raise LaunchError(
            "DDP_CONFIG.DIST_BACKEND is nccl but this node has no CUDA GPU; set it to gloo or auto"
        )
    num_nodes = ddp.WORLD_SIZE
    node_rank = ddp.WORLD_RANK
    if not 0 <= node_rank < num_nodes:
        raise LaunchError(
            f"DDP_CONFIG.WORLD_RANK = {node_rank} is outside [0, WORLD_SIZE={num_nodes}); "
            "give this node's index in WORLD_URLS"
        )
    dist_url = ddp.DIST_URL
    if num_nodes == 1 and dist_url.startswith("tcp://"):
        # One node: the rendezvous is local, so a busy port is not worth failing over.
        parsed = urlparse(dist_url)
        host, port = parsed.hostname or "127.0.0.1", parsed.port
        if not port or not _port_free(host, port):
            new_port = _free_port()
            logger.info("port %s on %s is busy; using free port %d", port, host, new_port)
            dist_url = f"tcp://{host}:{new_port}"
    return Topology(
        num_nodes=num_nodes,
        node_rank=node_rank,
        local_procs=local_procs,
        world_size=num_nodes * local_procs,
        rank_offset=node_rank * local_procs,
        dist_url=dist_url,
        backend=backend,
        use_cuda=use_cuda,
    )


def _threads_for(cfg, local_procs: int) -> int:
    wanted = cfg.DDP_CONFIG.THREADS_PER_PROC
    return wanted if wanted > 0 else max(1, available_cpus() // max(1, local_procs))


def _fill_ranks(cfg, world_size: int, rank: int, gpu: int):
    cfg = cfg.clone()
    cfg.defrost()
    cfg.DDP_CONFIG.GPU_WORLD_SIZE = world_size
    cfg.DDP_CONFIG.GPU_WORLD_RANK = rank
    cfg.DDP_CONFIG.GPU = gpu
    cfg.freeze()
    return cfg


def _worker(local_rank: int, main_func: Callable, cfg, topo: Topology, args: tuple) -> None:
    rank = topo.rank_offset + local_rank
    os.environ["LOCAL_RANK"] = str(local_rank)
    os.environ["RANK"] = str(rank)
    os.environ["WORLD_SIZE"] = str(topo.world_size)
    set_num_threads(_threads_for(cfg, topo.local_procs))
    gpu = local_rank if topo.use_cuda else -1
    if topo.use_cuda:
        torch.cuda.set_device(gpu)
    timeout = datetime.timedelta(seconds=cfg.DDP_CONFIG.INIT_TIMEOUT)
    try:
        dist.init_process_group(
            backend=topo.backend,
            init_method=topo.dist_url,
            world_size=topo.world_size,
            rank=rank,
            timeout=timeout,
        )
    except Exception as e:
        raise LaunchError(
            f"rank {rank}: could not join the process group at {topo.dist_url} within "
            f"{cfg.DDP_CONFIG.INIT_TIMEOUT}s ({str(e).splitlines()[0] if str(e) else type(e).__name__})"
        ) from None
    try:
        main_func(_fill_ranks(cfg, topo.world_size, rank, gpu), *args)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def launch(main_func: Callable, cfg, args: tuple = ()) -> Any:
    """Run ``main_func(cfg, *args)`` in every process of this node's share of the job.

    Raises:
        LaunchError: the topology is impossible, or a worker process failed (its rank is named).
    """
    if not cfg.DDP_CONFIG.DISTRIBUTED:
        set_num_threads(_threads_for(cfg, 1))
        gpu = 0 if torch.cuda.is_available() else -1
        return main_func(_fill_ranks(cfg, 1, 0, gpu), *args)
    topo = resolve_topology(cfg)
    logger.info(
        "node %d/%d: %d %s process(es), global ranks %d..%d of %d, backend %s, rendezvous %s",
        topo.node_rank, topo.num_nodes, topo.local_procs, "GPU" if topo.use_cuda else "CPU",
        topo.rank_offset, topo.rank_offset + topo.local_procs - 1, topo.world_size,
        topo.backend, topo.dist_url,
    )
    if topo.local_procs == 1 and topo.num_nodes == 1:
        # Nothing to spawn: run the single worker here, still inside a (1-rank) process group.
        return _worker(0, main_func, cfg, topo, args)
    try:
        mp.start_processes(
            _worker,
            nprocs=topo.local_procs,
            args=(main_func, cfg, topo, args),
            start_method="spawn",
            join=True,
        )
    except mp.ProcessRaisedException as e:
        last = str(e).strip().splitlines()[-1]
        raise LaunchError(f"worker process {e.error_index} (global rank "
                          f"{topo.rank_offset + e.error_index}) failed: {last}") from None
    except mp.ProcessExitedException as e:
        raise LaunchError(
            f"worker process {e.error_index} (global rank {topo.rank_offset + e.error_index}) "
            f"died with exit code {e.exit_code}"
            + (f" (signal {e.signal_name})" if getattr(e, "signal_name", None) else "")
        ) from None
    return None
