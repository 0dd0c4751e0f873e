"""The job spec: everything the launcher needs, resolved once from the config and the environment.

``resolve_job(cfg)`` runs once per command, on the command line (zoo/cli/job.py), and is the one
place that reads ``DDP_CONFIG`` for launching. It works out the topology (topology.py: ranks set
by torchrun / Slurm, else a scheduler's ``NODE_RANK``, else DDP_CONFIG with its override,
AUTO_RANK_MATCH and WORLD_RANK), takes the timeouts, restart count and preemption grace, and turns
the config into the agreement payload the nodes compare (agreement.py). The result is a frozen
:class:`JobSpec`; ``launch(main, spec, *args)`` (launch.py) takes it and never sees a config.

A JobSpec can also be written by hand, with no config at all (see tests/test_job_spec.py)::

    spec = JobSpec(source="by hand", num_nodes=1, node_rank=0, local_procs=2,
                   dist_url="tcp://127.0.0.1:29500", backend="gloo", use_cuda=False)
    launch(worker, spec, "an argument")  # worker("an argument") in 2 processes

What a worker needs from the job it asks ``zoo.utils.comm`` (rank, world size, device, and
:func:`~zoo.utils.comm.get_restart_round`); a training worker turns a restart into
:func:`resume_config` itself.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Tuple

import torch

from ..utils import comm
from .agreement import job_agreement
from .setup import output_dir
from .topology import LaunchError, Topology, resolve_topology


@dataclass(frozen=True)
class JobSpec(Topology):
    """This node's part of one job (the :class:`~zoo.launch.topology.Topology` fields: source,
    nodes, this node's rank, processes, rendezvous URL, backend, device, and the rank an outside
    launcher gave this process) and how the launcher runs it.

    ``world_size`` and ``rank_offset`` are known here for one node or an outside launcher; for
    several nodes the node rendezvous fills them in (in a copy: the spec itself never changes).
    """

    distributed: bool = True  # False (DDP_CONFIG.DISTRIBUTED): one plain call, no process group
    node_urls: Tuple[str, ...] = ()  # DDP_CONFIG.WORLD_URLS, node 0 first (may be empty)
    threads_per_proc: int = 0  # torch threads per process (0 = this node's cores / processes)
    init_timeout_s: float = 300.0  # rendezvous wait and the process group's timeout
    hang_timeout_s: float = 0.0  # a rank silent this long ends the job (0 = no heartbeat)
    max_restarts: int = 0  # times the job is re-formed after a failure (0 = fail fast)
    preempt_grace_s: float = 60.0  # how long preempted workers get to write their checkpoint
    output_dir: str = ""  # where workers' log files are (tracebacks named in the failure line)
    restart_round: int = 0  # restarts before this attempt (torchrun's, or zoo's own per round)
    # What the nodes compare (agreement.job_agreement): job identity, token hash, config items.
    agreement: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def device_kind(self) -> str:
        """"cuda" (one process per GPU) or "cpu"."""
        return "cuda" if self.use_cuda else "cpu"


def _int_env(env: Mapping[str, str], name: str, default: int = 0) -> int:
    try:
        return int(env.get(name) or default)
    except ValueError:
        return default


def _one_process(cfg, env: Mapping[str, str]) -> dict:
    """The topology fields of ``DISTRIBUTED False``: one process here, no group; a rank given by
    an outside launcher is recorded so that launch can refuse it."""
    use_cuda = torch.cuda.is_available()
    fields = dict(source="DDP_CONFIG", num_nodes=1, node_rank=0, local_procs=1, dist_url="",
                  backend="", use_cuda=use_cuda, how="DDP_CONFIG.DISTRIBUTED False",
                  world_size=1, rank_offset=0)
    if "RANK" in env and int(env.get("WORLD_SIZE", "1")) > 1:
        fields.update(source="environment (RANK/WORLD_SIZE)", world_size=int(env["WORLD_SIZE"]),
                      rank=int(env["RANK"]), local_rank=_int_env(env, "LOCAL_RANK"))
    return fields


def job_topology(cfg, env: Optional[Mapping[str, str]] = None,
                 node_rank: Optional[int] = None) -> Topology:
    """This node's place in the job of ``cfg`` (the :class:`Topology` part of
    :func:`resolve_job`); it reads ``DDP_CONFIG`` and the environment only, no data keys, so the
    command line knows which node it is before it prepares data. Arguments and errors are
    :func:`resolve_job`'s."""
    env = os.environ if env is None else env
    ddp = cfg.DDP_CONFIG
    if ddp.DISTRIBUTED:
        return resolve_topology(
            world_size=ddp.WORLD_SIZE, world_rank=ddp.WORLD_RANK,
            urls=tuple(str(u) for u in ddp.WORLD_URLS), auto_rank_match=ddp.AUTO_RANK_MATCH,
            dist_url=ddp.DIST_URL, backend=ddp.DIST_BACKEND, cpu_procs=ddp.NUM_CPU_PROCS,
            node_rank=node_rank, environ=env)
    return Topology(**_one_process(cfg, env))


def resolve_job(cfg, env: Optional[Mapping[str, str]] = None,
                node_rank: Optional[int] = None,
                topology: Optional[Topology] = None) -> JobSpec:
    """The JobSpec of ``cfg`` on this node; the topology is worked out here, once.

    Args:
        cfg: The merged config (the same on every node).
        env: Environment to read (default ``os.environ``): torchrun / Slurm / scheduler variables,
            ``ZOO_NODE_RANK``, ``ZOO_JOB_TOKEN``, ``TORCHELASTIC_RESTART_COUNT``.
        node_rank: This node's rank when the user gave it explicitly (``DDP_CONFIG.WORLD_RANK``
            on the command line); overrides AUTO_RANK_MATCH.
        topology: :func:`job_topology`'s answer for the same config and environment, when the
            caller has it already (it is then not worked out again).

    Raises:
        LaunchError: the topology is impossible here (one line naming the key or variable).
    """
    env = os.environ if env is None else env
    ddp = cfg.DDP_CONFIG
    urls = tuple(str(u) for u in ddp.WORLD_URLS)
    if topology is None:
        topology = job_topology(cfg, env, node_rank)
    fields = {name: getattr(topology, name) for name in Topology.__dataclass_fields__}
    if cfg.CONFIG.TRAIN.PRECISION == "fp16" and not fields["use_cuda"]:
        raise LaunchError("CONFIG.TRAIN.PRECISION fp16 needs a CUDA GPU and this node has none; "
                          "set it to bf16, fp32 or auto")
    # torchrun --max-restarts starts the ranks again after a failure: this is such a restart.
    restart = _int_env(env, "TORCHELASTIC_RESTART_COUNT") if fields.get("rank") is not None else 0
    return JobSpec(
        **fields,
        distributed=bool(ddp.DISTRIBUTED),
        node_urls=urls,
        threads_per_proc=int(ddp.THREADS_PER_PROC),
        init_timeout_s=float(ddp.INIT_TIMEOUT),
        hang_timeout_s=float(ddp.HANG_TIMEOUT),
        max_restarts=int(ddp.MAX_RESTARTS),
        preempt_grace_s=float(cfg.CONFIG.TRAIN.PREEMPT_GRACE),
        output_dir=output_dir(cfg),
        restart_round=restart,
        agreement=job_agreement(cfg, env),
    )


def resume_config(cfg):
    """The config a restarted worker runs: ``TRAIN.AUTO_RESUME`` on and ``RESUME_EPOCH`` -1, so it
    continues from the newest complete checkpoint (both keys may change between a run and its
    resumption, so the checkpoint's config still matches). ``cfg`` itself is not changed."""
    new = cfg.clone()
    new.defrost()
    new.CONFIG.TRAIN.AUTO_RESUME = True
    new.CONFIG.TRAIN.RESUME_EPOCH = -1
    if cfg.is_frozen():
        new.freeze()
    return new


def config_main(main_func: Callable, cfg, *args) -> Any:
    """The worker of the old call ``launch(main_func, cfg, args=...)``: ``main_func(cfg, *args)``,
    with :func:`resume_config` on a restart, as that call always did."""
    return main_func(resume_config(cfg) if comm.get_restart_round() else cfg, *args)
