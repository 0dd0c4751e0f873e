"""Where this node and process sit in the job, worked out in one place.

``resolve_topology(...)`` takes the DDP_CONFIG values as plain arguments (``resolve_job`` in
job.py reads them, once per run) and looks at these, first match wins:

1. A launcher that already started this process as one rank: torchrun / torch elastic / AzureML
   per-process (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``, ``LOCAL_RANK``), or a
   Slurm job step with several tasks per node (``SLURM_PROCID``, ``SLURM_NTASKS``,
   ``SLURM_LOCALID``, master = first host of ``SLURM_JOB_NODELIST``). Nothing is spawned.
2. A scheduler that started one launcher per node: Slurm with one task per node (``SLURM_NODEID``),
   or ``MASTER_ADDR`` / ``MASTER_PORT`` / ``NODE_RANK`` [/ ``WORLD_SIZE`` = nodes], as AzureML's
   per-node launch sets them.
   This node's workers are spawned as with DDP_CONFIG.
3. DDP_CONFIG: ``WORLD_SIZE`` nodes; this node's rank from an override (``DDP_CONFIG.WORLD_RANK`` on
   the command line or ``ZOO_NODE_RANK``), else by matching this host against ``WORLD_URLS``
   (``AUTO_RANK_MATCH``), else ``WORLD_RANK``.

Global ranks of spawned workers are only known after the node rendezvous (nodes may run different
numbers of processes), so for several nodes ``world_size`` / ``rank_offset`` are filled in later.
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass, replace
from typing import Mapping, Optional, Sequence, Tuple
from urllib.parse import unquote, urlparse

import torch

from ..utils import net
from ..utils.errors import UserError

logger = logging.getLogger(__name__)

# Environment variable that sets this node's rank, overriding AUTO_RANK_MATCH (e.g. several
# "nodes" on one host for testing, or hosts behind NAT whose WORLD_URLS addresses are not local).
NODE_RANK_ENV = "ZOO_NODE_RANK"

# Rendezvous port used under Slurm when neither MASTER_PORT nor a tcp:// DIST_URL port is given.
_DEFAULT_PORT = 29500


class LaunchError(UserError, RuntimeError):
    """The job's topology cannot be worked out or started; the message says what to change."""


@dataclass(frozen=True)
class Topology:
    """This node's (and, when a launcher started us as one rank, this process's) part of the job."""

    source: str  # "DDP_CONFIG", "torchrun", "Slurm", "scheduler (NODE_RANK)"
    num_nodes: int
    node_rank: int
    local_procs: int  # worker processes on this node
    dist_url: str  # tcp://host:port, file:///path, or env:// (torchrun: torch reads the env)
    backend: str
    use_cuda: bool
    how: str = ""  # how the node rank was found, for logs and tools/doctor.py
    world_size: Optional[int] = None  # processes in the job (None until the node rendezvous)
    rank_offset: Optional[int] = None  # global rank of this node's first process
    rank: Optional[int] = None  # set when a launcher already started this process as one rank
    local_rank: Optional[int] = None

    @property
    def assigned(self) -> bool:
        """True when this process is one rank started by torchrun / Slurm (nothing to spawn)."""
        return self.rank is not None


# --------------------------------------------------------------------------------------- helpers
def parse_tcp_url(url: str) -> tuple:
    """``tcp://host:port`` -> ``(host, port)``; port 0 when absent."""
    parsed = urlparse(url)
    try:
        port = parsed.port or 0
    except ValueError:
        raise LaunchError(f"DDP_CONFIG.DIST_URL = {url!r} has an invalid port; "
                          "write tcp://host:port") from None
    if not parsed.hostname:
        raise LaunchError(f"DDP_CONFIG.DIST_URL = {url!r} has no host; write tcp://host:port")
    return parsed.hostname, port


def file_url_path(url: str) -> str:
    """``file:///shared/x`` -> ``/shared/x``; ``file:///D:/pg`` -> ``D:/pg`` (Windows drives)."""
    path = unquote(url[len("file://"):])
    if re.match(r"^/[A-Za-z]:[\\/]", path):
        path = path[1:]
    if not path:
        raise LaunchError(f"DDP_CONFIG.DIST_URL = {url!r} names no file; write file:///shared/path")
    return path


def first_slurm_host(nodelist: str) -> str:
    """First host of a Slurm node list: ``gpu[003-005,9],cpu1`` -> ``gpu003``."""
    first = re.match(r"[^,\[]*(\[[^\]]*\])?[^,]*", nodelist.strip()).group(0)
    m = re.match(r"([^\[]*)\[([^\]]*)\](.*)", first)
    if not m:
        return first
    prefix, ranges, suffix = m.groups()
    return prefix + re.split(r"[-,]", ranges)[0] + suffix


def _int_env(env: Mapping[str, str], name: str) -> int:
    try:
        return int(env[name])
    except ValueError:
        raise LaunchError(f"environment variable {name}={env[name]!r} is not an integer") from None


@dataclass(frozen=True)
class _Asked:
    """What DDP_CONFIG asks for, as :func:`resolve_topology` got it."""

    world_size: int
    world_rank: int
    urls: Tuple[str, ...]
    auto_rank_match: bool
    dist_url: str
    backend: str
    cpu_procs: int


def _backend(asked: _Asked) -> tuple:
    """(backend, use_cuda, local processes) for this node."""
    use_cuda = torch.cuda.is_available()
    local_procs = torch.cuda.device_count() if use_cuda else asked.cpu_procs
    backend = asked.backend
    if backend == "auto":
        backend = "nccl" if use_cuda else "gloo"
    if backend == "nccl" and not use_cuda:
        raise LaunchError(
            "DDP_CONFIG.DIST_BACKEND is nccl but this node has no CUDA GPU; set it to gloo or auto"
        )
    return backend, use_cuda, local_procs


# --------------------------------------------------------------------- 1. ranks from a launcher
def _from_torchrun(asked: _Asked, env: Mapping[str, str]) -> Optional[Topology]:
    if "RANK" not in env:
        return None
    missing = [k for k in ("WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
    if missing:
        raise LaunchError(
            f"RANK is set in the environment but {', '.join(missing)} not: start the job with "
            "torchrun, or unset RANK to launch from DDP_CONFIG"
        )
    backend, use_cuda, _ = _backend(asked)
    world = _int_env(env, "WORLD_SIZE")
    local_world = int(env.get("LOCAL_WORLD_SIZE", 1))
    source = "torchrun" if "TORCHELASTIC_RUN_ID" in env else "environment (RANK/WORLD_SIZE)"
    return Topology(
        source=source,
        num_nodes=int(env.get("GROUP_WORLD_SIZE", max(1, world // max(1, local_world)))),
        node_rank=int(env.get("GROUP_RANK", env.get("NODE_RANK", 0))),
        local_procs=local_world,
        dist_url="env://",
        backend=backend,
        use_cuda=use_cuda,
        how=f"RANK={env['RANK']}, WORLD_SIZE={world}",
        world_size=world,
        rank=_int_env(env, "RANK"),
        local_rank=int(env.get("LOCAL_RANK", 0)),
    )


def _slurm_master(dist_url: str, env: Mapping[str, str]) -> str:
    nodelist = env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    host = env.get("MASTER_ADDR") or (first_slurm_host(nodelist) if nodelist else None)
    if not host:
        raise LaunchError("running under srun but SLURM_JOB_NODELIST is not set; "
                          "set MASTER_ADDR to the first node's address")
    port = env.get("MASTER_PORT")
    if not port and dist_url.startswith("tcp://"):
        port = parse_tcp_url(dist_url)[1] or None
    return f"tcp://{net.format_hostport(host, int(port or _DEFAULT_PORT))}"


def _from_slurm(asked: _Asked, env: Mapping[str, str]) -> Optional[Topology]:
    # Only inside a job step started by srun: the batch script itself also has SLURM_PROCID=0.
    if "SLURM_PROCID" not in env or not (env.get("SLURM_STEP_ID") or env.get("SLURM_STEPID")):
        return None
    ntasks = _int_env(env, "SLURM_NTASKS") if "SLURM_NTASKS" in env else 1
    nnodes = int(env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES") or 1)
    node_rank = int(env.get("SLURM_NODEID", 0))
    backend, use_cuda, local_procs = _backend(asked)
    dist_url = _slurm_master(asked.dist_url, env)
    if ntasks == nnodes:
        # One task per node: this task is the node's launcher and spawns one worker per GPU.
        return Topology(
            source="Slurm", num_nodes=nnodes, node_rank=node_rank, local_procs=local_procs,
            dist_url=dist_url, backend=backend, use_cuda=use_cuda,
            how=f"SLURM_NODEID={node_rank} of SLURM_NNODES={nnodes} (one task per node)",
        )
    rank = _int_env(env, "SLURM_PROCID")
    return Topology(
        source="Slurm", num_nodes=nnodes, node_rank=node_rank,
        local_procs=max(1, ntasks // max(1, nnodes)), dist_url=dist_url, backend=backend,
        use_cuda=use_cuda, how=f"SLURM_PROCID={rank} of SLURM_NTASKS={ntasks}",
        world_size=ntasks, rank=rank, local_rank=int(env.get("SLURM_LOCALID", 0)),
    )


# -------------------------------------------------------------- 2. node rank from a scheduler
def _from_node_env(asked: _Asked, env: Mapping[str, str]) -> Optional[Topology]:
    if not all(env.get(k) for k in ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK")):
        return None
    num_nodes = (_int_env(env, "WORLD_SIZE") if env.get("WORLD_SIZE")
                 else asked.world_size or len(asked.urls))
    node_rank = _int_env(env, "NODE_RANK")
    if not 0 <= node_rank < num_nodes:
        raise LaunchError(f"NODE_RANK={node_rank} is outside [0, {num_nodes}) nodes "
                          "(WORLD_SIZE in the environment, else DDP_CONFIG.WORLD_SIZE)")
    backend, use_cuda, local_procs = _backend(asked)
    return Topology(
        source="scheduler (NODE_RANK)", num_nodes=num_nodes, node_rank=node_rank,
        local_procs=local_procs,
        dist_url=f"tcp://{net.format_hostport(env['MASTER_ADDR'], _int_env(env, 'MASTER_PORT'))}",
        backend=backend, use_cuda=use_cuda, how=f"NODE_RANK={node_rank} from the environment",
    )


# ---------------------------------------------------------------------------- 3. DDP_CONFIG
def match_node_rank(urls, me: Optional[net.HostIdentity] = None) -> int:
    """Index of the one WORLD_URLS entry that names this host.

    Raises:
        LaunchError: no entry, or more than one entry, names this host.
    """
    me = me or net.host_identity()
    matches = [i for i, url in enumerate(urls) if net.is_this_host(url, me)]
    if len(matches) == 1:
        return matches[0]
    unresolved = [u for u in urls if not net.resolve(u)]
    note = f" ({', '.join(map(repr, unresolved))} did not resolve)" if unresolved else ""
    if not matches:
        raise LaunchError(
            f"DDP_CONFIG.WORLD_URLS: this host ({me.describe()}) matches none of "
            f"{list(urls)}{note}; add one of its addresses or set DDP_CONFIG.WORLD_RANK"
        )
    entries = ", ".join(f"[{i}] {urls[i]}" for i in matches)
    loop = [urls[i] for i in matches if any(net.is_loopback(a) for a in net.resolve(urls[i]))]
    hint = (f" ({', '.join(loop)} is a loopback address, which is every host; list node 0's real "
            "address)") if loop and len(loop) < len(matches) else ""
    raise LaunchError(
        f"DDP_CONFIG.WORLD_URLS: entries {entries} all name this host ({me.describe()}){hint}; "
        f"give each node its own address, or set this node's rank with DDP_CONFIG.WORLD_RANK n on "
        f"the command line or {NODE_RANK_ENV}=n (several nodes on one host)"
    )


def _node_rank_override(node_rank: Optional[int], env: Mapping[str, str]) -> Optional[int]:
    if node_rank is not None:
        return node_rank
    if env.get(NODE_RANK_ENV, "") != "":
        return _int_env(env, NODE_RANK_ENV)
    return None


def _rendezvous_url(url: str, env: Mapping[str, str]) -> str:
    if url.startswith("env://"):
        missing = [k for k in ("MASTER_ADDR", "MASTER_PORT") if not env.get(k)]
        if missing:
            raise LaunchError(f"DDP_CONFIG.DIST_URL is env:// but {' and '.join(missing)} "
                              "not set; export them or write tcp://<node 0>:<port>")
        return f"tcp://{net.format_hostport(env['MASTER_ADDR'], _int_env(env, 'MASTER_PORT'))}"
    return url


def _check_dist_url(url: str, urls, node_rank: int, use_urls: bool) -> None:
    """The rendezvous runs on node 0: DIST_URL's host must be node 0 (and this host, on node 0)."""
    if not url.startswith("tcp://"):
        return
    host, port = parse_tcp_url(url)
    if not port:
        raise LaunchError(f"DDP_CONFIG.DIST_URL = {url!r} needs a port for a multi-node job, "
                          "e.g. tcp://<node 0>:29500")
    if use_urls and not net.resolve(urls[0]):
        raise LaunchError(
            f"DDP_CONFIG.WORLD_URLS[0] = {urls[0]!r} (node 0, which hosts the rendezvous) does "
            "not resolve on this host: give node 0's IP address, or a name every node resolves")
    if use_urls and not net.same_host(host, urls[0]):
        unresolved = "" if net.resolve(host) else f" ({host!r} did not resolve)"
        raise LaunchError(
            f"DDP_CONFIG.DIST_URL = {url!r}: its host is not node 0 (WORLD_URLS[0] = "
            f"{urls[0]!r}){unresolved}; the rendezvous runs on node 0, so use "
            f"tcp://{net.format_hostport(urls[0], port)}"
        )
    if node_rank == 0 and not any(net.is_local(a) for a in net.resolve(host)):
        raise LaunchError(
            f"DDP_CONFIG.DIST_URL = {url!r}: this is node 0, which hosts the rendezvous, but "
            f"{host} is not one of its addresses ({net.host_identity().describe()}); put node "
            "0's address in DIST_URL, or, if this is another node, give its rank "
            "(DDP_CONFIG.WORLD_RANK N on its command line, or AUTO_RANK_MATCH True with "
            "WORLD_URLS)"
        )


def _single_node_url(url: str) -> str:
    """One node: the rendezvous is local, so a foreign host or a busy port is not worth failing."""
    if not url.startswith("tcp://"):
        return url
    host, port = parse_tcp_url(url)
    if not any(net.is_local(a) for a in net.resolve(host)):
        logger.info("DIST_URL host %s is not this machine; one node, so using 127.0.0.1", host)
        host = "127.0.0.1"
    if port and not net.port_is_free(port):
        logger.info("port %d is busy; one node, so using a free port", port)
        port = 0
    return f"tcp://{net.format_hostport(host, port)}"


def _from_config(asked: _Asked, node_rank: Optional[int], env: Mapping[str, str]) -> Topology:
    urls = list(asked.urls)
    num_nodes = asked.world_size or len(urls)
    backend, use_cuda, local_procs = _backend(asked)
    url = _rendezvous_url(asked.dist_url, env)
    override = _node_rank_override(node_rank, env)
    if num_nodes == 1:
        rank, how = 0, "one node (DDP_CONFIG.WORLD_SIZE 1)"
        if override not in (None, 0):
            raise LaunchError(f"node rank {override} given, but DDP_CONFIG.WORLD_SIZE is 1; "
                              "set WORLD_SIZE to the number of nodes")
    else:
        if asked.auto_rank_match and len(urls) != num_nodes:
            raise LaunchError(
                f"DDP_CONFIG.WORLD_URLS has {len(urls)} entries {urls} but DDP_CONFIG.WORLD_SIZE "
                f"is {num_nodes}; list one address or hostname per node (or set WORLD_SIZE 0 to "
                "take the node count from WORLD_URLS)"
            )
        if override is not None:
            rank, how = override, ("DDP_CONFIG.WORLD_RANK on the command line" if node_rank
                                   is not None else f"{NODE_RANK_ENV}={override}")
        elif asked.auto_rank_match:
            rank = match_node_rank(urls)
            how = f"AUTO_RANK_MATCH: this host is WORLD_URLS[{rank}] = {urls[rank]}"
        else:
            rank, how = asked.world_rank, "DDP_CONFIG.WORLD_RANK (AUTO_RANK_MATCH False)"
        if not 0 <= rank < num_nodes:
            raise LaunchError(
                f"DDP_CONFIG.WORLD_RANK = {rank} is outside [0, WORLD_SIZE={num_nodes}); "
                "give this node's index in WORLD_URLS"
            )
        _check_dist_url(url, urls, rank, use_urls=len(urls) == num_nodes)
    return Topology(
        source="DDP_CONFIG", num_nodes=num_nodes, node_rank=rank, local_procs=local_procs,
        dist_url=url, backend=backend, use_cuda=use_cuda, how=how,
    )


def resolve_topology(*, world_size: int = 1, world_rank: int = 0, urls: Sequence[str] = (),
                     auto_rank_match: bool = False, dist_url: str = "tcp://127.0.0.1:0",
                     backend: str = "auto", cpu_procs: int = 1, node_rank: Optional[int] = None,
                     environ: Optional[Mapping[str, str]] = None) -> Topology:
    """Work out this node's rank, process count and rendezvous URL (see the module docstring).

    Args:
        world_size, world_rank, urls, auto_rank_match, dist_url, backend, cpu_procs: The
            DDP_CONFIG values WORLD_SIZE, WORLD_RANK, WORLD_URLS, AUTO_RANK_MATCH, DIST_URL,
            DIST_BACKEND and NUM_CPU_PROCS (error messages name those keys).
        node_rank: This node's rank when the user gave it explicitly (``DDP_CONFIG.WORLD_RANK``
            on the command line); overrides AUTO_RANK_MATCH.
        environ: Environment to read (default ``os.environ``).

    Raises:
        LaunchError: one line naming the key or variable at fault and the fix.
    """
    env = os.environ if environ is None else environ
    asked = _Asked(world_size, world_rank, tuple(urls), bool(auto_rank_match), dist_url, backend,
                   cpu_procs)
    for source in (_from_torchrun, _from_slurm, _from_node_env):
        topo = source(asked, env)
        if topo is not None:
            break
    else:
        topo = _from_config(asked, node_rank, env)
        if int(env.get("SLURM_NNODES", 1)) > 1 and not env.get("SLURM_STEP_ID"):
            logger.warning("this Slurm job has %s nodes but was not started with srun, so only "
                           "this node takes part; run the command with srun", env["SLURM_NNODES"])
    if not topo.assigned and topo.num_nodes == 1:
        topo = replace(topo, dist_url=_single_node_url(topo.dist_url), world_size=topo.local_procs,
                       rank_offset=0)
    return topo
