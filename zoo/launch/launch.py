"""Start the processes of one job and join them into a process group.

``launch(main_func, cfg)`` is called on every node with the same config and goes through three
steps, once each:

1. Resolve: ``resolve_topology`` (topology.py) finds ranks set by torchrun / Slurm, else this
   node's rank from a scheduler's ``NODE_RANK`` or from DDP_CONFIG (override, AUTO_RANK_MATCH,
   WORLD_RANK). If a launcher already started this process as one rank, it joins the group here,
   checks that all ranks run the same config and zoo version, and calls ``main_func``: nothing is
   spawned, and restarts are that launcher's (torchrun ``--max-restarts``).
2. Rendezvous: ``NodeRendezvous`` (rendezvous.py) checks the nodes agree and gives this node its
   global ranks.
3. Start workers (:func:`_supervise`): one worker per GPU (or ``NUM_CPU_PROCS`` on CPU) is
   spawned, records its device in ``zoo.utils.comm``, joins the group and calls
   ``main_func(cfg)``. Ranks and the device are asked from ``zoo.utils.comm``.
   A failed worker stops this node; the failure is posted to the other nodes, whose workers stop
   at the latest after ``INIT_TIMEOUT`` (the process group's timeout), naming the rank that failed.
   With ``DDP_CONFIG.MAX_RESTARTS`` n > 0 every node then meets again (a new rendezvous round) and
   starts its workers again, up to n times, with ``TRAIN.AUTO_RESUME`` implied so they continue
   from the newest complete checkpoint. A worker that exits with ``PREEMPTED_EXIT_CODE`` is not
   restarted.

Why zoo supervises its own workers instead of running torch.distributed.elastic's agent: the
elastic rendezvous numbers nodes in join order (AUTO_RANK_MATCH / WORLD_URLS / ZOO_NODE_RANK fix
them), its static variant cannot re-form the group when node 0 goes away, the config-agreement
and job-identity round would be a custom rendezvous handler anyway, and its agent restarts on any
exit code (a preempted worker must not be restarted). torch.multiprocessing still starts and
stops the processes.

With ``DISTRIBUTED False`` it is a plain call in this process with no process group.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
import signal
import sys
import traceback
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..utils import comm, net
from ..utils.env import available_cpus, set_num_threads
from ..utils.errors import is_user_error, one_line
from ..utils.logger import write_to_log_file
from . import heartbeat
from .preemption import PREEMPTED_EXIT_CODE, raise_if_workers_preempted
from .rendezvous import NodeRendezvous, agree_in_process_group, open_store, worker_store
from .setup import output_dir
from .topology import LaunchError, Topology, parse_tcp_url, resolve_topology

__all__ = ["LaunchError", "Topology", "launch", "resolve_topology"]

logger = logging.getLogger(__name__)


# A worker that exits with this code was preempted (SIGTERM / SIGUSR1 from a scheduler): it has
# saved its state and the scheduler requeues the job, so a restart here would fight the scheduler.


def _restartable(kind: str) -> bool:
    """Whether a failure of this kind may restart the job: the one place that decides it. Not a
    preempted worker (above), nor a user error (it would fail the same way again)."""
    return kind not in ("preempted", "user")


class _UserStop(LaunchError):
    """A worker stops on a user error (the message says what to change): never restarted."""


class _WorkerFailure(Exception):
    """A local worker failed: ``kind`` is "died" (signal or exit code), "error" (it raised) or
    "preempted" (it exited with PREEMPTED_EXIT_CODE)."""

    def __init__(self, local_rank: int, kind: str, message: str, traceback: str = ""):
        super().__init__(message)
        self.local_rank, self.kind, self.message, self.traceback = (
            local_rank, kind, message, traceback)


class _RemoteFailure(Exception):
    """Another node posted a failure (``root``, see NodeRendezvous.root_cause); ours stopped."""

    def __init__(self, root: dict):
        # A heartbeat report names the silent rank itself; other failures get it named here.
        who = "" if root["kind"] == "hung" else (
            f"global rank {root['rank']} (node {root['node']}, {root['host']}) ")
        super().__init__(f"{who}{root['message']}; stopped this node's workers")
        self.root = root


def _threads_for(cfg, local_procs: int) -> int:
    wanted = cfg.DDP_CONFIG.THREADS_PER_PROC
    return wanted if wanted > 0 else max(1, available_cpus() // max(1, local_procs))


def _pin_gloo_interface(topo: Topology, cfg) -> None:
    """Make gloo use the interface that reaches node 0.

    By default gloo binds to the address the hostname resolves to, which is often 127.0.1.1 or a
    container-only address, so peers on other hosts cannot connect. GLOO_SOCKET_IFNAME set by the
    user always wins.
    """
    if topo.backend != "gloo" or topo.num_nodes <= 1 or os.environ.get("GLOO_SOCKET_IFNAME"):
        return
    if topo.dist_url.startswith("tcp://"):
        peer = parse_tcp_url(topo.dist_url)[0]
    elif os.environ.get("MASTER_ADDR"):
        peer = os.environ["MASTER_ADDR"]
    elif len(cfg.DDP_CONFIG.WORLD_URLS) == topo.num_nodes:
        peer = cfg.DDP_CONFIG.WORLD_URLS[0]
    else:
        return
    ifname = net.interface_for(peer)
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
        logger.info("gloo will use interface %s (the one that reaches node 0 at %s)", ifname, peer)


def _init_group(topo: Topology, rank: int, store: Optional[dist.Store], timeout_s: float) -> None:
    where = topo.dist_url if topo.dist_url != "env://" else (
        f"{os.environ.get('MASTER_ADDR')}:{os.environ.get('MASTER_PORT')}")
    try:
        dist.init_process_group(
            backend=topo.backend,
            init_method=None if store is not None else topo.dist_url,
            store=store,
            world_size=topo.world_size,
            rank=rank,
            timeout=datetime.timedelta(seconds=timeout_s),
        )
    except Exception as e:
        first = _last_line(str(e).strip().splitlines()[0]) if str(e).strip() else type(e).__name__
        hint = ""
        if topo.num_nodes > 1 and re.search(r"remote=\[(127\.|::1\])", first):
            hint = ("; peers announced a loopback address: set GLOO_SOCKET_IFNAME (or "
                    "NCCL_SOCKET_IFNAME) to the interface that reaches the other nodes")
        raise LaunchError(f"could not join the process group at {where} within {timeout_s:g}s "
                          f"({first}){hint}") from None


def _run_rank(rank: int, local_rank: int, main_func: Callable, cfg, topo: Topology,
              store: Optional[dist.Store], args: tuple, check_agreement: bool = False) -> Any:
    """Join the process group as ``rank``, run ``main_func``, leave the group."""
    set_num_threads(_threads_for(cfg, topo.local_procs))
    gpu = -1
    if topo.use_cuda:
        gpu = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(gpu)
    comm.set_device_index(gpu)
    _init_group(topo, rank, store, float(cfg.DDP_CONFIG.INIT_TIMEOUT))
    beat = None
    try:
        # Under torchrun / Slurm no launcher of zoo's reads a hang report: the ranks print it.
        beat = heartbeat.start(cfg, store, rank, topo.world_size, topo.node_rank, topo.assigned)
        if check_agreement:
            agree_in_process_group(cfg, topo)
        return main_func(cfg, *args)
    except LaunchError:
        raise
    except Exception as e:
        # The traceback stays in this rank's log file; what travels to the console is one line.
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
        if is_user_error(e):
            write_to_log_file(text, None, rank)
            raise _UserStop(one_line(e)) from None
        write_to_log_file(text, output_dir(cfg), rank)
        e.zoo_traceback_logged = True  # report_failure need not write it again
        raise
    finally:
        heartbeat.stop(beat)
        comm.set_device_index(None)
        if dist.is_initialized():
            dist.destroy_process_group()


def _worker(local_rank: int, main_func: Callable, cfg, topo: Topology, session: str,
            args: tuple) -> None:
    """Entry point of a spawned worker process."""
    _die_with_launcher()
    rank = topo.rank_offset + local_rank
    os.environ.update(LOCAL_RANK=str(local_rank), RANK=str(rank), WORLD_SIZE=str(topo.world_size))
    store = worker_store(topo.dist_url, session, float(cfg.DDP_CONFIG.INIT_TIMEOUT))
    _run_rank(rank, local_rank, main_func, cfg, topo, store, args)


def _die_with_launcher() -> None:
    """Linux: the kernel kills this worker when its launcher dies (SIGKILL leaves no time to stop
    it), so an orphan never trains on beside the workers of a restarted launcher."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _last_line(traceback_text: str, keep_type: bool = False) -> str:
    """The exception line of a worker's traceback, without C++ source locations and boilerplate."""
    lines = [ln for ln in traceback_text.strip().splitlines() if ln.strip()]
    last = lines[-1] if lines else "unknown error"
    if keep_type:
        return last
    last = re.sub(r"^[\w.]*(?:LaunchError|_UserStop): ", "", last)
    last = re.sub(r"\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\] ", "", last)
    return last.split(". This is typically caused by")[0]


def _stop(ctx, grace_s: float = 2.0) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.terminate()
    for p in ctx.processes:
        p.join(grace_s)
        if p.is_alive():
            p.kill()
            p.join()


def _spawn(main_func: Callable, cfg, topo: Topology, rdzv: NodeRendezvous, args: tuple) -> None:
    """Run this node's workers until they finish, one fails, or another node reports a failure.

    Raises:
        _WorkerFailure: for the local worker that failed first.
        _RemoteFailure: another node posted a failure; this node's workers were stopped.
    """
    ctx = mp.start_processes(_worker, nprocs=topo.local_procs,
                             args=(main_func, cfg, topo, rdzv.session, args),
                             start_method="spawn", join=False)
    try:
        # grace_period: after a failure the other workers get 2 s to stop by themselves (their
        # peers are gone), then SIGTERM, then SIGKILL, instead of torch's default 30 s.
        while not ctx.join(timeout=1.0, grace_period=2):
            # A worker stuck outside any collective would only notice a dead peer at its next
            # collective; a failure another node has posted stops this node right away.
            root = rdzv.remote_failure() if topo.num_nodes > 1 else None
            if root:
                _stop(ctx)
                raise _RemoteFailure(root)
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        # A worker that exited 75 was preempted: not a failure (see zoo/launch/preemption.py).
        raise_if_workers_preempted(ctx.processes, float(cfg.CONFIG.TRAIN.PREEMPT_GRACE))
        # join() stops the other workers with SIGTERM; a worker killed by any other signal is
        # the likelier root cause than one that raised because its peer vanished.
        killed = [i for i, p in enumerate(ctx.processes)
                  if p.exitcode is not None and p.exitcode < 0 and p.exitcode != -signal.SIGTERM]
        if killed and not isinstance(e, mp.ProcessExitedException):
            i = killed[0]
            raise _WorkerFailure(i, "died", _exit_text(-ctx.processes[i].exitcode, True)) from None
        if isinstance(e, mp.ProcessExitedException):
            by_signal = e.exit_code < 0
            text = _exit_text(-e.exit_code if by_signal else e.exit_code, by_signal)
            kind = "preempted" if e.exit_code == PREEMPTED_EXIT_CODE else "died"
            raise _WorkerFailure(e.error_index, kind, text) from None
        text = str(e).strip()
        peer = _lost_peer(_last_line(text), cfg, topo.num_nodes)
        if peer:  # not a bug of ours: a process on another node stopped or died
            raise _WorkerFailure(e.error_index, "error", f"lost its connection to {peer}, which "
                                 "stopped or died") from None
        last = _last_line(text, keep_type=True)
        expected = re.search(r"(LaunchError|_UserStop): ", last)  # its message says it all
        unexpected = "" if expected else "unexpected "
        kind = "user" if "_UserStop: " in last else "error"
        raise _WorkerFailure(e.error_index, kind, f"failed: {unexpected}{_last_line(text)}",
                             traceback="" if expected else text) from None


def _lost_peer(message: str, cfg, num_nodes: int) -> str:
    """``"node 1 (10.0.0.2)"`` when ``message`` is a backend's "a peer closed the connection"
    error (the node is named when exactly one WORLD_URLS entry has that address), else ""."""
    # gloo says e.g. "Connection closed by peer [10.0.0.2]:4242" or "Read error [10.0.0.2]:4242:
    # Connection reset by peer".
    m = re.search(r"\[([^\]\s]+)\]:\d+", message)
    if not m or not re.search(r"Connection (?:closed|reset) by peer|Broken pipe", message):
        return ""
    addr = m.group(1)
    urls = list(cfg.DDP_CONFIG.WORLD_URLS) if len(cfg.DDP_CONFIG.WORLD_URLS) == num_nodes else []
    nodes = [k for k, url in enumerate(urls) if addr == url or addr in net.resolve(url)]
    return f"node {nodes[0]} ({addr})" if len(nodes) == 1 else f"the process at {addr}"


def _exit_text(code: int, by_signal: bool) -> str:
    if by_signal:
        try:
            return f"died with signal {signal.Signals(code).name}"
        except ValueError:
            return f"died with signal {code}"
    return f"exited with code {code}"


def _explain(f: _WorkerFailure, rdzv: NodeRendezvous, topo: Topology, cfg) -> str:
    """One line: which rank of this node failed and, if known, which rank failed first anywhere."""
    rank = topo.rank_offset + f.local_rank
    hung = heartbeat.read_report(rdzv.pg_store())
    if hung:  # our worker ended (or was stopped) because a rank went silent: that is the cause
        if topo.num_nodes > 1:
            rdzv.record_failure(rank, "hung", hung)
        return hung
    text = f"global rank {rank} (node {topo.node_rank}, local process {f.local_rank}) {f.message}"
    root = None
    if topo.num_nodes > 1:
        rdzv.record_failure(rank, f.kind, f.message)
        root = rdzv.root_cause() if f.kind != "died" else None
    if root and root["rank"] != rank and root["kind"] == "died":
        # Our worker only stopped because a peer on another node went away: lead with that peer.
        return (f"global rank {root['rank']} (node {root['node']}, {root['host']}) "
                f"{root['message']}, so this node stopped too (global rank {rank} {f.message})")
    if root and root["rank"] != rank:
        text += (f" (the first failure reported in the job: global rank {root['rank']} on node "
                 f"{root['node']})")
    if f.traceback:
        log_path = os.path.join(output_dir(cfg), f"log_rank{rank}.txt")
        if os.path.isfile(log_path):  # the worker wrote its traceback there
            text += f" (an internal error, please report it; full traceback in {log_path})"
        else:
            logger.info("traceback of global rank %d:\n%s", rank, f.traceback)
    return text


def _run_here(main_func: Callable, cfg, args: tuple) -> Any:
    """``DISTRIBUTED False``: a plain call in this process, with no process group."""
    if "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        raise LaunchError(
            f"DDP_CONFIG.DISTRIBUTED is False but this process was started as rank "
            f"{os.environ['RANK']} of {os.environ['WORLD_SIZE']}; set it True or start one process"
        )
    set_num_threads(_threads_for(cfg, 1))
    comm.set_device_index(0 if torch.cuda.is_available() else -1)
    try:
        return main_func(cfg, *args)
    finally:
        comm.set_device_index(None)


def resume_config(cfg):
    """The config a restarted worker runs: ``TRAIN.AUTO_RESUME`` on and ``RESUME_EPOCH`` -1, so it
    continues from the newest complete checkpoint (both keys may change between a run and its
    resumption, so the checkpoint's config still matches)."""
    new = cfg.clone()
    new.defrost()
    new.CONFIG.TRAIN.AUTO_RESUME = True
    new.CONFIG.TRAIN.RESUME_EPOCH = -1
    if cfg.is_frozen():
        new.freeze()
    return new


def _run_assigned(main_func: Callable, cfg, topo: Topology, args: tuple, timeout_s: float) -> Any:
    """torchrun / Slurm started this process as one rank: join the group, spawn nothing."""
    logger.info("%s started this process as rank %d of %d (%s); not spawning workers",
                topo.source, topo.rank, topo.world_size, topo.how)
    if int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0) > 0:
        # torchrun --max-restarts started us again after a failure: continue, as our own restarts do
        logger.info("torchrun restart %s: resuming from the newest checkpoint",
                    os.environ["TORCHELASTIC_RESTART_COUNT"])
        cfg = resume_config(cfg)
    store = None
    if topo.dist_url != "env://":  # Slurm: rank 0 hosts the store on the first node
        store, _ = open_store(topo.dist_url, host_it=topo.rank == 0, timeout_s=timeout_s)
        store = dist.PrefixStore("zoo/pg/", store)
    try:
        return _run_rank(topo.rank, topo.local_rank, main_func, cfg, topo, store, args,
                         check_agreement=topo.world_size > 1)
    except LaunchError as e:
        raise LaunchError(f"rank {topo.rank} of {topo.world_size}: {e}") from None


def _log_layout(topo: Topology) -> None:
    logger.info(
        "node %d/%d (%s): %d %s process(es), global ranks %d..%d of %d, backend %s, "
        "rendezvous %s", topo.node_rank, topo.num_nodes, topo.how, topo.local_procs,
        "GPU" if topo.use_cuda else "CPU", topo.rank_offset,
        topo.rank_offset + topo.local_procs - 1, topo.world_size, topo.backend, topo.dist_url,
    )


def _run_workers(main_func: Callable, cfg, rdzv: NodeRendezvous, args: tuple) -> Any:
    """One attempt: this node's workers in the group ``rdzv`` formed last.

    Raises:
        _WorkerFailure, _RemoteFailure: as :func:`_spawn`.
    """
    topo = rdzv.topology
    if topo.local_procs == 1 and topo.num_nodes == 1 and not cfg.DDP_CONFIG.MAX_RESTARTS:
        # Nothing to spawn: run the single worker here, still inside a (1-rank) process group.
        # (With restarts it is spawned: a crash of this process could not be restarted.)
        store = worker_store(topo.dist_url, rdzv.session, rdzv.timeout_s)
        try:
            return _run_rank(0, 0, main_func, cfg, topo, store, args)
        finally:
            del store  # release the store before the rendezvous closes (and a file store goes)
    _spawn(main_func, cfg, topo, rdzv, args)
    return None


def _supervise(main_func: Callable, cfg, rdzv: NodeRendezvous, args: tuple) -> Any:
    """Start this node's workers; after a failure, while ``DDP_CONFIG.MAX_RESTARTS`` allows, meet
    the other nodes again (a new rendezvous round) and start them again from the newest checkpoint.

    Raises:
        LaunchError: a failure that may not be restarted, or one after the last restart (the
            rank that failed is named).
    """
    max_restarts = cfg.DDP_CONFIG.MAX_RESTARTS
    while True:
        _log_layout(rdzv.topology)
        try:
            return _run_workers(main_func, resume_config(cfg) if rdzv.restarts else cfg, rdzv,
                                args)
        except _WorkerFailure as f:
            text, kind = _explain(f, rdzv, rdzv.topology, cfg), f.kind
        except _RemoteFailure as r:
            text, kind = str(r), r.root["kind"]
        if not max_restarts:
            raise LaunchError(text)
        if not _restartable(kind):
            why = "preempted" if kind == "preempted" else "it would fail the same way again"
            raise LaunchError(f"{text} (not restarted: {why})")
        if rdzv.restarts >= max_restarts:
            raise LaunchError(f"{text} (after {rdzv.restarts} of {max_restarts} restarts)")
        logger.warning("%s; restart %d of %d: the nodes meet again and resume from the newest "
                       "checkpoint", text, rdzv.restarts + 1, max_restarts)
        rdzv.reform()


def launch(main_func: Callable, cfg, args: tuple = (), node_rank: Optional[int] = None) -> Any:
    """Run ``main_func(cfg, *args)`` in every process of this node's share of the job.

    Args:
        main_func: Called once per process with the config and ``args``; it asks
            ``zoo.utils.comm`` for its rank, the world size and its device.
        cfg: The merged config; the same on every node.
        args: Extra positional arguments for ``main_func`` (picklable).
        node_rank: This node's rank when given explicitly (``DDP_CONFIG.WORLD_RANK`` on the command
            line); overrides AUTO_RANK_MATCH. ``ZOO_NODE_RANK`` in the environment does the same.

    Raises:
        LaunchError: the topology is impossible, nodes disagree, or a worker failed (its rank is
            named, and the rank that failed first anywhere in the job when another node knows it)
            and no restart is left.
    """
    if not cfg.DDP_CONFIG.DISTRIBUTED:
        return _run_here(main_func, cfg, args)
    topo = resolve_topology(cfg, node_rank)  # 1. resolve
    # Workers inherit this: c10d's C++ warnings (retries, peers that closed) only repeat our errors.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    _pin_gloo_interface(topo, cfg)
    timeout_s = float(cfg.DDP_CONFIG.INIT_TIMEOUT)
    if topo.assigned:
        return _run_assigned(main_func, cfg, topo, args, timeout_s)
    with NodeRendezvous(topo, cfg, timeout_s) as rdzv:  # 2. rendezvous
        return _supervise(main_func, cfg, rdzv, args)  # 3. start workers (again after a failure)
