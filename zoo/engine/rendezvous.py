"""The node rendezvous and preflight checks, run by every node's launcher before its workers start.

Node 0's launcher hosts a c10d store: a ``TCPStore`` listening on DIST_URL's port, or a
``FileStore`` at the ``file://`` path on a shared file system. Every node's launcher registers there
with its process count, resolved backend, zoo and torch versions and its config (minus per-node
keys). Node 0 checks that they agree and posts the plan: each node's first global rank and the world
size, so nodes may run different numbers of processes. Workers then join the process group through
the same store. The store also collects worker failures, so a node whose workers stopped because a
peer vanished can name the rank that failed first.

Keys (all under ``zoo/``): ``session`` (a fresh id per run: a reused file store is appended to,
never read stale), ``<session>/count/<k>`` and ``<session>/node/<k>/<i>`` (registrations; two for
one rank are a duplicate), ``<session>/plan``,
``<session>/failure/<i>``, ``<session>/finished``, and ``<session>/pg/`` for the process group.
"""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import logging
import os
import socket
import time
import uuid
from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.distributed as dist

from .. import __version__
from ..config.tree import diff_cfg, flatten_cfg
from ..utils import net
from .topology import LaunchError, Topology, file_url_path, parse_tcp_url

logger = logging.getLogger(__name__)

# Keys that may differ between nodes (or only record the job's layout, which the launcher keeps in
# zoo.utils.comm) and so are left out of the config comparison.
PER_NODE_KEYS = (
    "DDP_CONFIG.WORLD_RANK",
    "DDP_CONFIG.GPU",
    "DDP_CONFIG.GPU_WORLD_RANK",
    "DDP_CONFIG.GPU_WORLD_SIZE",
    "DDP_CONFIG.NUM_CPU_PROCS",
    "DDP_CONFIG.THREADS_PER_PROC",
)

# After a failure, how long a launcher waits for other nodes to report theirs (to name the root
# cause), and how long node 0 keeps its store up for nodes that are still reporting.
REPORT_GRACE_S = 3.0


# ------------------------------------------------------------------------- config agreement
def config_items(cfg) -> Dict[str, object]:
    """The config as flat ``{"CONFIG.TRAIN.LR": 0.1, ...}`` without the per-node keys."""
    return {k: v for k, v in flatten_cfg(cfg).items() if k not in PER_NODE_KEYS}


def config_fingerprint(items: Dict[str, object]) -> str:
    """Short hash of :func:`config_items`; equal on nodes that run the same config."""
    text = json.dumps(items, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def node_summary(cfg, topo: Topology) -> dict:
    """What a node (or rank) tells the others about itself before training."""
    items = config_items(cfg)
    return {
        "host": socket.gethostname(),
        "procs": topo.local_procs,
        "backend": topo.backend,
        "zoo": __version__,
        "torch": torch.__version__.split("+")[0],
        "config_hash": config_fingerprint(items),
        "config": items,
    }


def compare_summaries(
    summaries: List[dict], label: Callable[[int], str]
) -> Tuple[List[str], List[str]]:
    """Errors and warnings about what differs from entry 0 (zoo version, backend, config keys)."""
    errors, warnings = [], []
    ref = summaries[0]
    for i, s in enumerate(summaries[1:], start=1):
        if s["zoo"] != ref["zoo"]:
            errors.append(f"{label(i)} runs zoo {s['zoo']} but {label(0)} runs zoo {ref['zoo']}; "
                          "install the same version everywhere")
        if s["backend"] != ref["backend"]:
            errors.append(f"{label(i)} uses backend {s['backend']} but {label(0)} uses "
                          f"{ref['backend']}; set DDP_CONFIG.DIST_BACKEND explicitly on all nodes")
        if s["torch"] != ref["torch"]:
            warnings.append(f"{label(i)} runs torch {s['torch']}, {label(0)} torch {ref['torch']}")
        if s["config_hash"] != ref["config_hash"]:
            diff = diff_cfg(ref["config"], s["config"], missing=None)
            shown = "; ".join(f"{k} = {mine!r} (on {label(0)}: {theirs!r})"
                              for k, theirs, mine in diff[:4])
            more = f" and {len(diff) - 4} more" if len(diff) > 4 else ""
            errors.append(f"the config on {label(i)} differs in {len(diff)} key(s): {shown}{more}; "
                          "run every node with the same YAML and overrides")
    return errors, warnings


# ----------------------------------------------------------------------------------- stores
def _wait_for_port(host: str, port: int, timeout_s: float) -> None:
    """Wait until node 0's store accepts TCP connections, or fail naming address and port."""
    deadline = time.monotonic() + timeout_s
    last = "no answer"
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, timeout_s)):
                return
        except OSError as e:
            last = e.strerror or type(e).__name__
        if time.monotonic() >= deadline:
            where = net.format_hostport(host, port)
            raise LaunchError(
                f"node 0's rendezvous at {where} did not answer within {timeout_s:g}s "
                f"({last.lower()}): start the same command on node 0, check DDP_CONFIG.DIST_URL, "
                f"that this node can reach {host} and that port {port} is open there"
            )
        time.sleep(0.5)


def open_store(url: str, host_it: bool, timeout_s: float) -> Tuple[dist.Store, str]:
    """Host (node 0) or connect to the store at ``url``; returns ``(store, url with real port)``."""
    timeout = datetime.timedelta(seconds=timeout_s)
    if url.startswith("file://"):
        path = file_url_path(url)
        if host_it:
            os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        else:
            deadline = time.monotonic() + timeout_s
            while not os.path.exists(path):
                if time.monotonic() >= deadline:
                    raise LaunchError(
                        f"node 0 did not create the rendezvous file {path} within {timeout_s:g}s "
                        "(DDP_CONFIG.DIST_URL): start node 0 too, and put the file on a file "
                        "system every node shares"
                    )
                time.sleep(0.2)
        store = dist.FileStore(path, -1)
        store.set_timeout(timeout)
        return store, url
    host, port = parse_tcp_url(url)
    if not host_it:
        _wait_for_port(host, port, timeout_s)
        return dist.TCPStore(host, port, is_master=False, timeout=timeout), url
    try:
        store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=timeout)
    except (RuntimeError, OSError) as e:
        text = str(e)
        if "EADDRINUSE" in text or "already in use" in text:
            raise LaunchError(
                f"DDP_CONFIG.DIST_URL = {url!r}: port {port} on node 0 is already in use (another "
                "job, or a process left from an earlier run); stop it or choose another port "
                "(the same on every node)"
            ) from None
        raise LaunchError(f"node 0 could not listen on port {port} for DDP_CONFIG.DIST_URL = "
                          f"{url!r}: {text.splitlines()[0]}") from None
    return store, f"tcp://{net.format_hostport(host, store.port)}"


def worker_store(url: str, session: str, timeout_s: float) -> dist.Store:
    """The store a worker joins the process group with (node 0's, under this run's prefix)."""
    store, _ = open_store(url, host_it=False, timeout_s=timeout_s)
    return dist.PrefixStore(f"zoo/{session}/pg/", store)


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


# ------------------------------------------------------------------------------ rendezvous
class NodeRendezvous:
    """This node's seat at the node rendezvous; keep it open while the workers run.

    Use as ``with NodeRendezvous(topo, cfg, timeout) as rdzv: topo = rdzv.topology ...``.
    """

    def __init__(self, topo: Topology, cfg, timeout_s: float):
        self.timeout_s = timeout_s
        self.summary = node_summary(cfg, topo)
        self.nonce = uuid.uuid4().hex
        self.store, url = open_store(topo.dist_url, host_it=topo.node_rank == 0,
                                     timeout_s=timeout_s)
        self.topology = dataclasses.replace(topo, dist_url=url)
        self.session = ""
        self.plan: dict = {}
        self._store_lost = False

    # -- the handshake
    def _key(self, name: str) -> str:
        return f"zoo/{self.session}/{name}"

    def _register(self) -> None:
        """Add this node's record under the current session (several per rank = a duplicate)."""
        k = self.topology.node_rank
        i = self.store.add(self._key(f"count/{k}"), 1)
        self.store.set(self._key(f"node/{k}/{i}"), json.dumps(dict(self.summary, nonce=self.nonce),
                                                              default=str))

    def _records(self, k: int) -> List[dict]:
        n = self.store.add(self._key(f"count/{k}"), 0)
        return [json.loads(self.store.get(self._key(f"node/{k}/{i}"))) for i in range(1, n + 1)]

    def _label(self, regs: List[dict]) -> Callable[[int], str]:
        return lambda i: f"node {i} ({regs[i]['host']})"

    def _host(self) -> dict:
        """Node 0: open a session, wait for every node, check they agree, post the plan."""
        n = self.topology.num_nodes
        self.session = uuid.uuid4().hex[:12]
        self.store.set("zoo/session", self.session)
        self._register()
        keys = [self._key(f"node/{k}/1") for k in range(n)]
        deadline = time.monotonic() + self.timeout_s
        while not self.store.check(keys):
            if time.monotonic() >= deadline:
                missing = [k for k, key in enumerate(keys) if not self.store.check([key])]
                error = (f"node 0 waited {self.timeout_s:g}s at {self.topology.dist_url} but "
                         f"node(s) {missing} never joined: start the same command there and check "
                         f"they can reach this address (DDP_CONFIG.WORLD_SIZE = {n} nodes)")
                nonces = [r["nonce"] for k in range(n) if k not in missing
                          for r in self._records(k)]
                self._post({"error": error, "nonces": nonces})
                raise LaunchError(error)
            time.sleep(0.1)
        records = [self._records(k) for k in range(n)]
        regs = [r[0] for r in records]
        dups = [f"node rank {k} is claimed by {' and '.join(x['host'] for x in r)}"
                for k, r in enumerate(records) if len(r) > 1]
        if dups:
            error = "; ".join(dups) + " (give every node its own WORLD_URLS entry or node rank)"
            self._post({"error": error, "nonces": [x["nonce"] for r in records for x in r]})
            raise LaunchError(error)
        errors, warnings = compare_summaries(regs, self._label(regs))
        counts = [r["procs"] for r in regs]
        offsets = [sum(counts[:k]) for k in range(n)]
        plan = {"nonces": [r["nonce"] for r in regs], "error": "; ".join(errors),
                "warnings": warnings, "counts": counts, "offsets": offsets,
                "world_size": sum(counts), "hosts": [r["host"] for r in regs]}
        self._post(plan)
        return plan

    def _post(self, plan: dict) -> None:
        self.store.set(self._key("plan"), json.dumps(plan))

    def _join(self) -> dict:
        """Node k > 0: register under node 0's current session and wait for a plan that has us."""
        k = self.topology.node_rank
        deadline = time.monotonic() + self.timeout_s
        registered, left_out = None, False
        while True:
            try:
                if self.store.check(["zoo/session"]):
                    self.session = self.store.get("zoo/session").decode()
                    if self.session != registered:  # a new run of node 0 (or a stale file store)
                        self._register()
                        registered, left_out = self.session, False
                    if self.store.check([self._key("plan")]):
                        plan = json.loads(self.store.get(self._key("plan")))
                        if self.nonce in plan["nonces"]:
                            return plan
                        left_out = True
            except RuntimeError as e:  # c10d errors: node 0 went away mid-rendezvous
                raise LaunchError(
                    f"node {k}: lost node 0's rendezvous at {self.topology.dist_url} "
                    f"({_first_line(e)}); see node 0's output"
                ) from None
            if time.monotonic() >= deadline:
                if left_out:
                    raise LaunchError(
                        f"node {k}: node 0 started the job without this node (is another node "
                        f"also node {k}? see node 0's output); give every node its own rank"
                    )
                raise LaunchError(
                    f"node {k}: no plan from node 0 through {self.topology.dist_url} within "
                    f"{self.timeout_s:g}s; check that every node was started and that "
                    "DDP_CONFIG.WORLD_SIZE is the number of nodes"
                )
            time.sleep(0.2)

    def __enter__(self) -> "NodeRendezvous":
        try:
            plan = self._host() if self.topology.node_rank == 0 else self._join()
        except BaseException:
            self.close()
            raise
        if plan["error"]:
            self.close()
            raise LaunchError(plan["error"])
        for w in plan["warnings"]:
            logger.warning("%s", w)
        self.plan = plan
        k = self.topology.node_rank
        self.topology = dataclasses.replace(
            self.topology, world_size=plan["world_size"], rank_offset=plan["offsets"][k]
        )
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- failures and shutdown
    def record_failure(self, rank: int, kind: str, message: str) -> None:
        """Tell the other nodes that ``rank`` failed (kind "died": killed or exited; "error")."""
        record = {"rank": rank, "node": self.topology.node_rank, "host": self.summary["host"],
                  "kind": kind, "message": message}
        try:
            i = self.store.add(self._key("failures"), 1)
            self.store.set(self._key(f"failure/{i}"), json.dumps(record))
        except Exception:  # node 0 and its store may already be gone
            pass

    def failures(self) -> List[dict]:
        """Failures posted so far by any node ([] once node 0's store is gone)."""
        if self._store_lost:
            return []
        try:
            n = self.store.add(self._key("failures"), 0)
            return [json.loads(self.store.get(self._key(f"failure/{i}"))) for i in range(1, n + 1)]
        except Exception:
            self._store_lost = True  # node 0 finished or died; torch's timeouts take over
            return []

    def remote_failure(self) -> Optional[dict]:
        """The root cause if another node has posted a failure, else None (one store call)."""
        if any(f["node"] != self.topology.node_rank for f in self.failures()):
            return self.root_cause(wait_s=1.0)
        return None

    def root_cause(self, wait_s: float = REPORT_GRACE_S) -> Optional[dict]:
        """The first rank that died (else failed) anywhere in the job; waits briefly for reports."""
        deadline = time.monotonic() + wait_s
        while True:
            found = self.failures()
            died = [f for f in found if f["kind"] == "died"]
            if died or time.monotonic() >= deadline:
                return (died or found or [None])[0]
            time.sleep(0.2)

    def close(self) -> None:
        """Say this node is done; node 0 keeps the store up a little for nodes still reporting."""
        if self.store is None:
            return
        try:
            if self.session:
                done = self.store.add(self._key("finished"), 1)
                deadline = time.monotonic() + min(REPORT_GRACE_S, self.timeout_s)
                while (self.topology.node_rank == 0 and done < self.topology.num_nodes
                       and time.monotonic() < deadline):
                    time.sleep(0.2)
                    done = self.store.add(self._key("finished"), 0)
        except Exception:
            pass
        self.store = None
        url = self.topology.dist_url
        if self.topology.num_nodes == 1 and url.startswith("file://"):
            try:  # one node: nobody else reads the file; remove it so the next run starts clean
                os.remove(file_url_path(url))
            except OSError:
                pass


# -------------------------------------------------------- agreement inside a process group
def agree_in_process_group(cfg, topo: Topology) -> None:
    """For ranks started by torchrun / Slurm: compare configs and versions over the new group.

    Raises:
        LaunchError: naming the ranks and keys that differ.
    """
    summary = node_summary(cfg, topo)
    light = {k: v for k, v in summary.items() if k != "config"}
    gathered: List[Optional[dict]] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, light)
    if len({(g["config_hash"], g["zoo"], g["backend"]) for g in gathered}) > 1:
        dist.all_gather_object(gathered, summary)
    else:
        gathered = [dict(g, config={}) for g in gathered]
    errors, warnings = compare_summaries(gathered, lambda i: f"rank {i} ({gathered[i]['host']})")
    if dist.get_rank() == 0:
        for w in warnings:
            logger.warning("%s", w)
    if errors:
        raise LaunchError("; ".join(errors))
