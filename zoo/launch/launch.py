"""Start the processes of one job and join them into a process group.

``launch(main_func, spec, *args)`` is called on every node with the node's :class:`JobSpec`
(``resolve_job`` in job.py made it from the config and the environment, once, on the command
line) and never sees a config. It goes through two steps:

1. If an outside launcher already started this process as one rank (torchrun / Slurm:
   ``spec.rank`` is set), it joins the group here, checks that all ranks run the same config and
   zoo version (``spec.agreement``), and calls ``main_func(*args)``: nothing is spawned, and
   restarts are that launcher's (torchrun ``--max-restarts``; ``spec.restart_round`` says which).
2. Otherwise the node rendezvous (``NodeRendezvous``, rendezvous.py) checks the nodes agree and
   gives this node its global ranks; then (:func:`_supervise`) one worker per GPU (or
   ``NUM_CPU_PROCS`` on CPU: ``spec.local_procs``) is spawned, records its device and the restart
   round in ``zoo.utils.comm``, joins the group and calls ``main_func(*args)``. Ranks, the device
   and the restart round are asked from ``zoo.utils.comm``.
   A failed worker stops this node; the failure is posted to the other nodes, whose workers stop
   at the latest after ``spec.init_timeout_s`` (the process group's timeout), naming the rank that
   failed. With ``spec.max_restarts`` n > 0 every node then meets again (a new rendezvous round)
   and starts its workers again, up to n times, with ``comm.get_restart_round()`` > 0 so they
   continue from the newest complete checkpoint (the trainer turns on ``TRAIN.AUTO_RESUME``). A
   worker that exits with ``PREEMPTED_EXIT_CODE`` is not restarted.

Why zoo supervises its own workers instead of running torch.distributed.elastic's agent: the
elastic rendezvous numbers nodes in join order (AUTO_RANK_MATCH / WORLD_URLS / ZOO_NODE_RANK fix
them), its static variant cannot re-form the group when node 0 goes away, the config-agreement
and job-identity round would be a custom rendezvous handler anyway, and its agent restarts on any
exit code (a preempted worker must not be restarted). torch.multiprocessing still starts and
stops the processes.

With ``spec.distributed`` False (``DISTRIBUTED False``) it is a plain call in this process with no
process group.

The old call ``launch(main_func, cfg, args=(...), node_rank=...)`` with a config still works for
now: it warns (DeprecationWarning), resolves the spec from the config and calls
``main_func(cfg, *args)``.
"""

from __future__ import annotations

import datetime
import inspect
import logging
import multiprocessing
import os
import re
import signal
import sys
import traceback
import warnings
from dataclasses import replace
from typing import Any, Callable, Optional

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from ..utils import comm, net
from ..utils.env import available_cpus, set_num_threads
from ..utils.errors import is_user_error, one_line, user_code_failure
from ..utils.logger import write_to_log_file
from . import heartbeat
from .job import JobSpec
from .preemption import PREEMPTED_EXIT_CODE, raise_if_workers_preempted
from .rendezvous import NodeRendezvous, agree_in_process_group
from .store import open_store, worker_store
from .topology import LaunchError, parse_tcp_url

__all__ = ["JobSpec", "LaunchError", "launch"]

logger = logging.getLogger(__name__)


# A worker that exits with this code was preempted (SIGTERM / SIGUSR1 from a scheduler): it has
# saved its state and the scheduler requeues the job, so a restart here would fight the scheduler.


def _restartable(kind: str) -> bool:
    """Whether a failure of this kind may restart the job: the one place that decides it. Not a
    preempted worker (above), nor a user error (it would fail the same way again)."""
    return kind not in ("preempted", "user")


class _UserStop(LaunchError):
    """A worker stops on a user error (the message says what to change): never restarted."""


class _UserCodeError(LaunchError):
    """A worker stops on an error its user's code raised (a model, a hook): one line saying
    where; restarted as any other error is (:func:`_restartable`)."""


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
        who = "" if root["kind"] in ("hung", "lost") else (
            f"global rank {root['rank']} (node {root['node']}, {root['host']}) ")
        super().__init__(f"{who}{root['message']}; stopped this node's workers")
        self.root = root


def _threads_for(wanted: int, local_procs: int) -> int:
    return wanted if wanted > 0 else max(1, available_cpus() // max(1, local_procs))


def _node_urls(spec: JobSpec) -> tuple:
    """WORLD_URLS when it lists one address per node, else () (the nodes are not named)."""
    return spec.node_urls if len(spec.node_urls) == spec.num_nodes else ()


def _pin_gloo_interface(topo: JobSpec) -> None:
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
    elif _node_urls(topo):
        peer = topo.node_urls[0]
    else:
        return
    ifname = net.interface_for(peer)
    if ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = ifname
        logger.info("gloo will use interface %s (the one that reaches node 0 at %s)", ifname, peer)


def _init_group(topo: JobSpec, rank: int, store: Optional[dist.Store], timeout_s: float) -> None:
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
        first = _error_line(str(e).strip().splitlines()[0]) if str(e).strip() else type(e).__name__
        hint = ""
        if topo.num_nodes > 1 and re.search(r"remote=\[(127\.|::1\])", first):
            hint = ("; peers announced a loopback address: set GLOO_SOCKET_IFNAME (or "
                    "NCCL_SOCKET_IFNAME) to the interface that reaches the other nodes")
        raise LaunchError(f"could not join the process group at {where} within {timeout_s:g}s "
                          f"({first}){hint}") from None


def _run_rank(rank: int, local_rank: int, main_func: Callable, topo: JobSpec,
              store: Optional[dist.Store], args: tuple, check_agreement: bool = False) -> Any:
    """Join the process group as ``rank``, run ``main_func(*args)``, leave the group."""
    set_num_threads(_threads_for(topo.threads_per_proc, topo.local_procs))
    gpu = -1
    if topo.use_cuda:
        gpu = local_rank % torch.cuda.device_count()
        torch.cuda.set_device(gpu)
    comm.set_device_index(gpu)
    comm.set_restart_round(topo.restart_round)
    _init_group(topo, rank, store, topo.init_timeout_s)
    beat = None
    try:
        # Under torchrun / Slurm no launcher of zoo's reads a hang report: the ranks print it.
        beat = heartbeat.start(store, rank, topo.world_size, topo.node_rank, topo.assigned,
                               topo.hang_timeout_s, topo.init_timeout_s)
        if check_agreement:
            agree_in_process_group(topo)
        return main_func(*args)
    except LaunchError:
        raise
    except Exception as e:
        # The traceback stays in this rank's log file; what travels to the console is one line.
        text = "".join(traceback.format_exception(type(e), e, e.__traceback__)).rstrip()
        if is_user_error(e):
            write_to_log_file(text, None, rank)
            raise _UserStop(one_line(e)) from None
        log_path = write_to_log_file(text, topo.output_dir or None, rank)
        theirs = user_code_failure(e, log_path)
        if theirs:  # the user's code raised it: not reported as a bug of zoo's
            raise _UserCodeError(theirs) from None
        e.zoo_traceback_logged = True  # report_failure need not write it again
        raise
    finally:
        heartbeat.stop(beat)
        comm.set_device_index(None)
        comm.set_restart_round(0)
        comm.leave_process_group()


def _worker(local_rank: int, main_func: Callable, topo: JobSpec, session: str,
            args: tuple) -> None:
    """Entry point of a spawned worker process."""
    _die_with_launcher()
    # A process started with "spawn" keeps it as its default start method, so each of its
    # DataLoader workers would start a fresh interpreter and import torch and zoo again (seconds
    # apiece, for every worker of every rank). Back to the platform's default, as in a process
    # torchrun or the user started: fork on Linux up to Python 3.13, forkserver from 3.14.
    multiprocessing.set_start_method(None, force=True)
    rank = topo.rank_offset + local_rank
    os.environ.update(LOCAL_RANK=str(local_rank), RANK=str(rank), WORLD_SIZE=str(topo.world_size))
    store = worker_store(topo.dist_url, session, topo.init_timeout_s)
    _run_rank(rank, local_rank, main_func, topo, store, args)


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


def _error_line(text: str, keep_type: bool = False) -> str:
    """The first line of the exception a worker's traceback ends with (the error's type and what
    happened; a multi-line message's later lines are advice and details), without C++ source
    locations and boilerplate. ``text`` without a traceback: its first non-empty line."""
    lines = [ln.rstrip() for ln in text.strip().splitlines() if ln.strip()]
    starts = [i for i, ln in enumerate(lines) if ln.startswith("Traceback (most recent call last)")]
    line = lines[0] if lines else "unknown error"
    if starts:
        # After the last traceback's frames (indented lines) comes the exception's first line.
        rest = [ln for ln in lines[starts[-1] + 1:] if not ln[:1].isspace()]
        if rest:
            line = rest[0]
            if re.fullmatch(r"[\w.]+:", line.strip()) and len(rest) > 1:  # "Error:" then the text
                line = f"{line.strip()} {rest[1].strip()}"
    line = line.strip()
    if keep_type:
        return line
    line = re.sub(r"^[\w.]*(?:LaunchError|_UserStop|_UserCodeError): ", "", line)
    line = re.sub(r"\[[^\]\s]+\.(?:cc|cpp|h|hpp):\d+\] ", "", line)
    return line.split(". This is typically caused by")[0]


def _stop(ctx, grace_s: float = 2.0) -> None:
    for p in ctx.processes:
        if p.is_alive():
            p.terminate()
    for p in ctx.processes:
        p.join(grace_s)
        if p.is_alive():
            p.kill()
            p.join()


# After a failure the other workers get 2 s to stop by themselves (their peers are gone), then
# SIGTERM, then SIGKILL, instead of torch's default 30 s; torch < 2.4's join() has no such
# argument (it sends SIGTERM at once).
_JOIN_GRACE = ({"grace_period": 2}
               if "grace_period" in inspect.signature(mp.ProcessContext.join).parameters else {})


def _spawn(main_func: Callable, topo: JobSpec, rdzv: NodeRendezvous, args: tuple) -> None:
    """Run this node's workers until they finish, one fails, or another node reports a failure.

    Raises:
        _WorkerFailure: for the local worker that failed first.
        _RemoteFailure: another node posted a failure; this node's workers were stopped.
    """
    ctx = mp.start_processes(_worker, nprocs=topo.local_procs,
                             args=(main_func, topo, rdzv.session, args),
                             start_method="spawn", join=False)
    try:
        _join(ctx, topo, rdzv)
    finally:
        _remove_error_files(ctx)


def _remove_error_files(ctx: mp.ProcessContext) -> None:
    """Delete the temporary files torch gives each worker to write its traceback to: join()
    read them and the failure is reported from there; torch leaves them in the temp folder."""
    for path in getattr(ctx, "error_files", ()):
        try:
            os.remove(path)
        except FileNotFoundError:
            pass  # written only by a worker that raised


def _join(ctx: mp.ProcessContext, topo: JobSpec, rdzv: NodeRendezvous) -> None:
    """Wait for the workers of ``ctx`` (see :func:`_spawn`, which raises what this raises)."""
    try:
        while not ctx.join(timeout=1.0, **_JOIN_GRACE):
            if topo.num_nodes == 1:
                continue
            # This launcher is alive: a second launcher of this node rank is told so at once.
            if not rdzv.beat():
                # Node 0's store is silent. Workers cut off from node 0 may never end by
                # themselves (their store requests wait again and again): past the limit they
                # are stopped, with one line saying why.
                lost = rdzv.node_0_lost()
                if lost:
                    _stop(ctx)
                    raise _RemoteFailure(lost)
                continue
            # A worker stuck outside any collective would only notice a dead peer at its next
            # collective; a failure another node has posted stops this node right away.
            root = rdzv.remote_failure()
            if root:
                _stop(ctx)
                raise _RemoteFailure(root)
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        # A worker that exited 75 was preempted: not a failure (see zoo/launch/preemption.py).
        raise_if_workers_preempted(ctx.processes, topo.preempt_grace_s)
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
        peer = _lost_peer(_error_line(text), _node_urls(topo))
        if peer:  # not a bug of ours: a process on another node stopped or died
            raise _WorkerFailure(e.error_index, "error", f"lost its connection to {peer}, which "
                                 "stopped or died") from None
        last = _error_line(text, keep_type=True)
        expected = re.search(r"(LaunchError|_UserStop|_UserCodeError): ", last)  # it says it all
        unexpected = "" if expected else "unexpected "
        kind = "user" if "_UserStop: " in last else "error"
        raise _WorkerFailure(e.error_index, kind, f"failed: {unexpected}{_error_line(text)}",
                             traceback="" if expected else text) from None


def _lost_peer(message: str, urls) -> str:
    """``"node 1 (10.0.0.2)"`` when ``message`` is a backend's "a peer closed the connection"
    error (the node is named when exactly one of ``urls``, the nodes' WORLD_URLS entries, has
    that address), else ""."""
    # gloo says e.g. "Connection closed by peer [10.0.0.2]:4242" or "Read error [10.0.0.2]:4242:
    # Connection reset by peer".
    m = re.search(r"\[([^\]\s]+)\]:\d+", message)
    if not m or not re.search(r"Connection (?:closed|reset) by peer|Broken pipe", message):
        return ""
    addr = m.group(1)
    nodes = [k for k, url in enumerate(urls) if addr == url or addr in net.resolve(url)]
    return f"node {nodes[0]} ({addr})" if len(nodes) == 1 else f"the process at {addr}"


def _exit_text(code: int, by_signal: bool) -> str:
    if by_signal:
        try:
            return f"died with signal {signal.Signals(code).name}"
        except ValueError:
            return f"died with signal {code}"
    return f"exited with code {code}"


def _explain(f: _WorkerFailure, rdzv: NodeRendezvous, topo: JobSpec) -> str:
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
        log_path = os.path.join(topo.output_dir, f"log_rank{rank}.txt")
        if os.path.isfile(log_path):  # the worker wrote its traceback there
            text += f" (an internal error, please report it; full traceback in {log_path})"
        else:
            logger.info("traceback of global rank %d:\n%s", rank, f.traceback)
    return text


def _run_here(main_func: Callable, spec: JobSpec, args: tuple) -> Any:
    """``DISTRIBUTED False``: a plain call in this process, with no process group."""
    if spec.assigned:
        raise LaunchError(
            f"DDP_CONFIG.DISTRIBUTED is False but this process was started as rank "
            f"{spec.rank} of {spec.world_size}; set it True or start one process"
        )
    set_num_threads(_threads_for(spec.threads_per_proc, 1))
    comm.set_device_index(0 if torch.cuda.is_available() else -1)
    try:
        return main_func(*args)
    finally:
        comm.set_device_index(None)


def _run_assigned(main_func: Callable, topo: JobSpec, args: tuple) -> Any:
    """torchrun / Slurm started this process as one rank: join the group, spawn nothing."""
    logger.info("%s started this process as rank %d of %d (%s); not spawning workers",
                topo.source, topo.rank, topo.world_size, topo.how)
    if topo.restart_round > 0:
        # torchrun --max-restarts started us again after a failure: continue, as our own restarts do
        logger.info("torchrun restart %d: resuming from the newest checkpoint", topo.restart_round)
    store = None
    if topo.dist_url != "env://":  # Slurm: rank 0 hosts the store on the first node
        store, _ = open_store(topo.dist_url, host_it=topo.rank == 0, timeout_s=topo.init_timeout_s)
        store = dist.PrefixStore("zoo/pg/", store)
    try:
        return _run_rank(topo.rank, topo.local_rank, main_func, topo, store, args,
                         check_agreement=topo.world_size > 1)
    except LaunchError as e:
        raise LaunchError(f"rank {topo.rank} of {topo.world_size}: {e}") from None


def _log_layout(topo: JobSpec) -> None:
    logger.info(
        "node %d/%d (%s): %d %s process(es), global ranks %d..%d of %d, backend %s, "
        "rendezvous %s", topo.node_rank, topo.num_nodes, topo.how, topo.local_procs,
        "GPU" if topo.use_cuda else "CPU", topo.rank_offset,
        topo.rank_offset + topo.local_procs - 1, topo.world_size, topo.backend, topo.dist_url,
    )


def _run_workers(main_func: Callable, topo: JobSpec, rdzv: NodeRendezvous, args: tuple) -> Any:
    """One attempt: this node's workers in the group ``rdzv`` formed last (``topo`` is its spec,
    with this round's ranks and restart round).

    Raises:
        _WorkerFailure, _RemoteFailure: as :func:`_spawn`.
    """
    if topo.local_procs == 1 and topo.num_nodes == 1 and not topo.max_restarts:
        # Nothing to spawn: run the single worker here, still inside a (1-rank) process group.
        # (With restarts it is spawned: a crash of this process could not be restarted.)
        store = worker_store(topo.dist_url, rdzv.session, rdzv.timeout_s)
        try:
            return _run_rank(0, 0, main_func, topo, store, args)
        finally:
            del store  # release the store before the rendezvous closes (and a file store goes)
    _spawn(main_func, topo, rdzv, args)
    return None


def _supervise(main_func: Callable, rdzv: NodeRendezvous, args: tuple) -> Any:
    """Start this node's workers; after a failure, while ``spec.max_restarts`` allows, meet the
    other nodes again (a new rendezvous round) and start them again from the newest checkpoint.

    Raises:
        LaunchError: a failure that may not be restarted, or one after the last restart (the
            rank that failed is named).
    """
    max_restarts = rdzv.topology.max_restarts
    while True:
        _log_layout(rdzv.topology)
        topo = replace(rdzv.topology, restart_round=rdzv.restarts)
        try:
            return _run_workers(main_func, topo, rdzv, args)
        except _WorkerFailure as f:
            text, kind = _explain(f, rdzv, topo), f.kind
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


def _is_config(obj: Any) -> bool:
    from yacs.config import CfgNode

    return isinstance(obj, CfgNode)


def _launch_config(main_func: Callable, cfg, args: tuple, node_rank: Optional[int]) -> Any:
    """The old call ``launch(main_func, cfg, args=..., node_rank=...)``: resolve the spec from
    ``cfg`` here and run ``main_func(cfg, *args)`` (resumed on a restart, as before)."""
    from .job import config_main, resolve_job

    warnings.warn("launch(main_func, cfg) is deprecated: resolve the job once with "
                  "zoo.launch.job.resolve_job(cfg) and call launch(main_func, spec, cfg, ...), "
                  "which runs main_func(cfg, ...)", DeprecationWarning, stacklevel=3)
    return launch(config_main, resolve_job(cfg, node_rank=node_rank), main_func, cfg, *args)


def launch(main_func: Callable, spec: JobSpec, *args: Any, **deprecated: Any) -> Any:
    """Run ``main_func(*args)`` in every process of this node's share of the job.

    Args:
        main_func: Called once per process with ``args``; it asks ``zoo.utils.comm`` for its rank,
            the world size, its device and the restart round. Picklable (a module-level function)
            when processes are spawned.
        spec: This node's part of the job, from ``zoo.launch.job.resolve_job(cfg)`` on the command
            line or written by hand. (A config here is the deprecated old call: see the module
            docstring; ``args=`` and ``node_rank=`` keywords belong to it only.)
        args: Positional arguments for ``main_func`` (picklable), e.g. the config.

    Raises:
        LaunchError: the topology is impossible, nodes disagree, or a worker failed (its rank is
            named, and the rank that failed first anywhere in the job when another node knows it)
            and no restart is left.
    """
    if _is_config(spec):  # the old signature: launch(main_func, cfg, args=(), node_rank=None)
        old = dict(zip(("args", "node_rank"), args), **deprecated)
        if len(args) > 2 or set(old) - {"args", "node_rank"}:
            raise TypeError("launch(main_func, cfg) takes args=(...) and node_rank=; use "
                            "launch(main_func, resolve_job(cfg), cfg, ...)")
        return _launch_config(main_func, spec, tuple(old.get("args", ())), old.get("node_rank"))
    if deprecated:
        raise TypeError(f"launch() got unexpected keyword argument(s) "
                        f"{', '.join(sorted(deprecated))}; pass main_func's arguments "
                        "positionally: launch(main_func, spec, *args)")
    if not isinstance(spec, JobSpec):
        raise TypeError(f"launch() needs a JobSpec (zoo.launch.job.resolve_job), got "
                        f"{type(spec).__name__}")
    if not spec.distributed:
        return _run_here(main_func, spec, args)
    # Workers inherit this: c10d's C++ warnings (retries, peers that closed) only repeat our errors.
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    _pin_gloo_interface(spec)
    if spec.assigned:
        return _run_assigned(main_func, spec, args)
    with NodeRendezvous(spec) as rdzv:  # the node rendezvous (again after a failure)
        return _supervise(main_func, rdzv, args)
