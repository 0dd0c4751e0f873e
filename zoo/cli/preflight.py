"""The checks behind ``tools/doctor.py``: everything the launcher does before training, reported.

Run on every node at the same time with the job's config. Local checks (versions, this host's
names and addresses, topology, the rendezvous port, gloo's interface) need nothing from other nodes;
then, unless ``local_only``, the real node rendezvous runs (configs and versions compared, global
ranks assigned) and one all-reduce crosses every rank, exactly as a training job would start.
"""

from __future__ import annotations

import platform
import socket
import time
from typing import Callable, Optional

import torch

from .. import __version__
from ..launch.agreement import config_fingerprint, config_items
from ..launch.job import JobSpec, resolve_job
from ..launch.launch import LaunchError, launch
from ..launch.topology import parse_tcp_url
from ..utils import comm, net

Report = Callable[[str, str, str], None]


def print_report(status: str, topic: str, text: str) -> None:
    print(f"{status:<5} {topic:<12} {text}", flush=True)


def _probe() -> None:
    """Runs in every rank: one all-reduce and a gather of who is where."""
    start = time.perf_counter()
    x = torch.ones(1, device=comm.get_device())
    comm.all_reduce_sum(x)
    ms = (time.perf_counter() - start) * 1000
    where = comm.all_gather_object((socket.gethostname(), comm.get_rank()))
    if comm.get_local_rank() == 0:
        world = comm.get_world_size()
        ok = int(x.item()) == world
        hosts = {}
        for host, rank in where:
            hosts.setdefault(host, []).append(rank)
        layout = "; ".join(f"{h}: ranks {min(r)}..{max(r)}" for h, r in hosts.items())
        print_report("ok" if ok else "FAIL", "collective",
                     f"all_reduce over {world} ranks gave {int(x.item())} in {ms:.0f} ms "
                     f"({layout})")
        if not ok:
            raise LaunchError(f"all_reduce over {world} ranks gave {int(x.item())}")


def _local_checks(cfg, node_rank: Optional[int], report: Report) -> Optional[JobSpec]:
    """The checks that need no other node; returns the job's spec, or None when one failed."""
    me = net.host_identity()
    report("ok", "versions", f"zoo {__version__}, torch {torch.__version__}, python "
           f"{platform.python_version()}, {platform.system()}")
    report("ok", "host", me.describe())
    fingerprint = config_fingerprint(config_items(cfg))
    report("info", "config", f"fingerprint {fingerprint} (equal on every node, or the job stops)")
    try:
        topo = resolve_job(cfg, node_rank=node_rank)
    except LaunchError as e:
        report("FAIL", "topology", str(e))
        return None
    procs = f"{topo.local_procs} {'GPU' if topo.use_cuda else 'CPU'} process(es)"
    if topo.assigned:
        report("ok", "topology", f"{topo.source}: rank {topo.rank} of {topo.world_size} "
               f"({topo.how}); nothing is spawned")
    else:
        report("ok", "topology", f"{topo.source}: node {topo.node_rank} of {topo.num_nodes} "
               f"({topo.how}), {procs}, backend {topo.backend}")
    if topo.dist_url.startswith("tcp://"):
        host, port = parse_tcp_url(topo.dist_url)
        where = net.format_hostport(host, port)
        if topo.node_rank == 0 and not topo.assigned:
            if port and not net.port_is_free(port):
                report("FAIL", "rendezvous", f"this node hosts {where} but port {port} is in use; "
                       "stop the other process or choose another port in DDP_CONFIG.DIST_URL")
                return None
            report("ok", "rendezvous", f"this node hosts it at {where} (port free)")
        else:
            try:
                with socket.create_connection((host, port), timeout=3):
                    report("ok", "rendezvous", f"{where} answers")
            except ConnectionRefusedError:  # node 0's machine answers; nothing listens yet
                report("info", "rendezvous", f"{where} does not answer yet (connection "
                       "refused); fine if node 0 is not started yet")
            except OSError as e:  # no route, unreachable, or dropped: node 0 cannot be reached
                why = "no answer within 3 s" if isinstance(e, socket.timeout) else (
                    e.strerror or str(e))
                report("FAIL", "rendezvous", f"{where} cannot be reached from this host ({why}): "
                       "check the address in DDP_CONFIG.DIST_URL / WORLD_URLS, this host's "
                       "routes and any firewall between the nodes")
                return None
        src = net.source_address_for(host)
        if src is None:
            report("FAIL", "interface", f"this host has no route to {host}: check the address "
                   "in DDP_CONFIG.DIST_URL / WORLD_URLS and this host's routes")
            return None
        if topo.backend == "gloo" and topo.num_nodes > 1:
            ifname = net.interface_for(host)
            report("ok" if ifname else "info", "interface",
                   f"node 0 is reached from {src} on {ifname or 'an unknown interface'}"
                   + (" (gloo will use it)" if ifname else "; set GLOO_SOCKET_IFNAME"))
    else:
        report("info", "rendezvous", topo.dist_url)
    return topo


def run_checks(cfg, node_rank: Optional[int] = None, local_only: bool = False,
               report: Report = print_report) -> bool:
    """Report each check; returns True when all passed."""
    if not cfg.DDP_CONFIG.DISTRIBUTED:
        report("info", "topology", "DDP_CONFIG.DISTRIBUTED is False: one process, nothing to check")
        return True
    spec = _local_checks(cfg, node_rank, report)
    if spec is None:
        return False
    if local_only:
        return True
    report("info", "rendezvous", f"joining the other nodes (waits up to DDP_CONFIG.INIT_TIMEOUT = "
           f"{spec.init_timeout_s:g}s) ...")
    try:
        launch(_probe, spec)
    except LaunchError as e:
        report("FAIL", "job", str(e))
        return False
    finally:
        comm.leave_process_group()
    report("ok", "job", "nodes agree on config and zoo version; ranks assigned; collective works")
    return True
