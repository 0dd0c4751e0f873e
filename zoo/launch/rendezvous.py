"""The node rendezvous and preflight checks, run by every node's launcher before its workers start.

Node 0's launcher hosts a c10d store: a ``TCPStore`` listening on DIST_URL's port, or a
``FileStore`` at the ``file://`` path on a shared file system. Every node's launcher registers there
with its process count, resolved backend, zoo and torch versions and its config (minus per-node
keys). Node 0 checks that they agree and posts the plan: each node's first global rank and the world
size, so nodes may run different numbers of processes. Workers then join the process group through
the same store. The store also collects worker failures, so a node whose workers stopped because a
peer vanished can name the rank that failed first.

Everything a node says about itself comes from its JobSpec (job.py): process count, backend, and
the agreement payload ``resolve_job`` computed from the config; this module never sees a config.

Job identity (agreement.py): a hash of the config's math keys and of the optional secret
(``ZOO_JOB_TOKEN``, else ``DDP_CONFIG.JOB_TOKEN``). Node 0 publishes it under the fixed key
``zoo/job``; a launcher whose identity differs (another job started on the same port by accident)
stops there with one line, having written nothing but a note under ``zoo/stranger/<i>`` that node 0
logs as one warning. Every other key lives under the identity, so a stranger never reads or
overwrites them. The token itself never leaves the process: only its hash goes into the identity.

Keys (under ``zoo/<job>/``): ``session`` (``<job>/<run>/r<n>``: a fresh run id per start of node
0, so a reused file store is appended to, never read stale, and a round number ``n`` that node 0
raises each time the group is re-formed after a failure, see ``DDP_CONFIG.MAX_RESTARTS``); then
under ``zoo/<session>/``: ``count/<k>`` and ``node/<k>/<i>`` (registrations; two for one rank are
a duplicate), ``plan``, ``alive/<k>`` (a count node k's launcher raises every second while its
workers run), ``failure/<i>``, ``finished``, and ``pg/`` for the process group. Each round has its
own keys, so a restarted group never reads a failure or a process-group key of the round before.

A launcher of node k that finds the current round already running without it (its plan posted,
its nonce not in it) is either a re-run of a node k that died (it waits for the round node 0
opens next, see Restarts) or a second launcher of a node k that is alive. ``alive/<k>`` tells them
apart: when it rises while the newcomer watches, node k is alive, and the newcomer stops with one
line, leaving only a note (under ``zoo/stranger/<i>``, as a stranger does) that node 0 logs as
one warning.

Restarts: after a failure every node's launcher stops its workers and calls :meth:`NodeRendezvous.
reform`; node 0 opens the next round and the others register there again. A node whose launcher
died starts from scratch, reads the current session and registers in it like the others; when
node 0's launcher died, the others reconnect to the port until the re-run node 0 opens a new run.
Every registration carries how many restarts its node has seen; the plan takes the largest, so a
re-run launcher learns the job is a restart (and its workers resume).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
import time
import uuid
from typing import TYPE_CHECKING, Callable, List, Optional, Tuple

import torch.distributed as dist

from .agreement import compare_summaries, local_differences, node_summary
from .store import open_store, pg_prefix, worker_store  # noqa: F401 (imported from here too)
from .topology import NODE_RANK_ENV, LaunchError, file_url_path

if TYPE_CHECKING:  # the spec is handed in; this module never builds one
    from .job import JobSpec

logger = logging.getLogger(__name__)

# After a failure, how long a launcher waits for other nodes to report theirs (to name the root
# cause), and how long node 0 keeps its store up for nodes that are still reporting.
REPORT_GRACE_S = 3.0


# Node 0 says which nodes it is waiting for once they are this late (a quiet console for minutes
# looks like a hang).
_SAY_WAITING_AFTER_S = 5.0


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


def _own_connection(store: dist.Store) -> dist.Store:
    """A connection of its own to ``store`` (``store`` itself where it cannot be cloned: a file
    store, which never waits on a network)."""
    try:
        return store.clone()
    except (RuntimeError, AttributeError):
        return store


# ------------------------------------------------------------------------------ rendezvous
class NodeRendezvous:
    """This node's seat at the node rendezvous; keep it open while the workers run.

    Use as ``with NodeRendezvous(spec) as rdzv: spec = rdzv.topology ...``: ``topology`` is the
    spec with this round's ``world_size`` and ``rank_offset`` (and the store's real port).
    """

    def __init__(self, spec: JobSpec):
        self.timeout_s = spec.init_timeout_s
        self.summary = node_summary(spec.agreement, spec.local_procs, spec.backend)
        self.job = spec.agreement.get("job") or "unnamed"
        self.token_hash = spec.agreement.get("token_hash", "")
        self._strangers_seen = 0
        self._stale_job: Optional[str] = None
        self._joined: Optional[str] = None  # node 0's identity when it differs from ours
        self.nonce = uuid.uuid4().hex
        self.store, url = open_store(spec.dist_url, host_it=spec.node_rank == 0,
                                     timeout_s=self.timeout_s, any_port=spec.num_nodes == 1)
        self.topology = dataclasses.replace(spec, dist_url=url)
        self.session = ""
        self.plan: dict = {}
        self._store_lost = False
        # Restarts this job has seen (the plan's count), node 0's run id and its next round number.
        self.restarts = 0
        self._run, self._round = "", 0
        # With restarts allowed, a node that lost node 0's store waits for a re-run node 0.
        self.reconnect = bool(spec.max_restarts)
        # While the workers run: how long node 0's store may stay silent before this node stops
        # (DDP_CONFIG.HANG_TIMEOUT, else INIT_TIMEOUT), the connection that asks it (its own, with
        # a timeout of a few seconds) and when it last answered.
        self.silence_key = "HANG_TIMEOUT" if spec.hang_timeout_s > 0 else "INIT_TIMEOUT"
        self.silence_limit_s = spec.hang_timeout_s or spec.init_timeout_s
        self._prober: Optional[dist.Store] = None
        self._beating: Optional[threading.Thread] = None
        self.answered_at = time.monotonic()
        self._posted = 0  # failures posted by any node, as the last beat counted them

    # -- the handshake
    def _key(self, name: str) -> str:
        return f"zoo/{self.session}/{name}"

    def _register(self) -> None:
        """Add this node's record under the current session (several per rank = a duplicate)."""
        k = self.topology.node_rank
        i = self.store.add(self._key(f"count/{k}"), 1)
        record = dict(self.summary, nonce=self.nonce, restarts=self.restarts)
        self.store.set(self._key(f"node/{k}/{i}"), json.dumps(record, default=str))

    def _records(self, k: int) -> List[dict]:
        n = self.store.add(self._key(f"count/{k}"), 0)
        return [json.loads(self.store.get(self._key(f"node/{k}/{i}"))) for i in range(1, n + 1)]

    def _label(self, regs: List[dict]) -> Callable[[int], str]:
        return lambda i: f"node {i} ({regs[i]['host']})"

    def _host(self) -> dict:
        """Node 0: open a session, wait for every node, check they agree, post the plan."""
        n = self.topology.num_nodes
        self._publish_job(forming=True)
        self._run = self._run or f"{self.job}/{uuid.uuid4().hex[:12]}"
        self.session = f"{self._run}/r{self._round}"
        self._round += 1
        self.store.set(f"zoo/{self.job}/session", self.session)
        self._register()
        keys = [self._key(f"node/{k}/1") for k in range(n)]
        start = time.monotonic()
        deadline, said = start + self.timeout_s, False

        def absent() -> List[int]:
            return [k for k, key in enumerate(keys) if not self.store.check([key])]

        while not self.store.check(keys):
            self._note_strangers()
            if not said and time.monotonic() - start >= _SAY_WAITING_AFTER_S:
                said = True
                logger.info("node 0: waiting for node(s) %s to join at %s (up to "
                            "DDP_CONFIG.INIT_TIMEOUT = %gs)", absent(), self.topology.dist_url,
                            self.timeout_s)
            if time.monotonic() >= deadline:
                missing = absent()
                error = (f"node 0 waited {self.timeout_s:g}s at {self.topology.dist_url} but "
                         f"node(s) {missing} never joined: start the same command there (where it "
                         "already ran, its own error line says why it stopped before joining: "
                         "its address, its output folder, ...) and check they can reach this "
                         f"address (DDP_CONFIG.WORLD_SIZE = {n} nodes)")
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
                "world_size": sum(counts), "hosts": [r["host"] for r in regs],
                "restarts": max(r.get("restarts", 0) for r in regs)}
        local = local_differences(regs, self._label(regs))
        if local and not errors:
            logger.warning("%s", local)
        self._post(plan)
        self._publish_job(forming=False)
        return plan

    # -- job identity
    def _publish_job(self, forming: bool) -> None:
        """Node 0: say which job holds this store, and whether it still accepts nodes."""
        self.store.set("zoo/job", json.dumps({"id": self.job, "token": self.token_hash,
                                              "forming": forming}))

    def _note_strangers(self) -> None:
        """Node 0: one warning line per launcher that was refused since last time (another job's,
        or a second launcher of a running node)."""
        if self.topology.node_rank != 0 or self.store is None:
            return
        n = self.store.add("zoo/strangers", 0)
        for i in range(self._strangers_seen + 1, n + 1):
            if not self.store.check([f"zoo/stranger/{i}"]):  # not written yet: next time
                n = i - 1
                break
            s = json.loads(self.store.get(f"zoo/stranger/{i}"))
            if s.get("kind") == "duplicate":
                logger.warning(
                    "a second launcher of node %s (host %s) tried to join while node %s (%s) runs "
                    "this job and was told to stop; this job goes on", s["node"], s["host"],
                    s["node"], s["holder"])
                continue
            logger.warning(
                "a launcher with another job identity (%s, %s) tried to join as node %s from host "
                "%s and was refused; this job goes on (give each job its own DIST_URL port)",
                s["job"], s["why"], s["node"], s["host"])
        self._strangers_seen = max(self._strangers_seen, n)

    def _check_job(self, url_is_file: bool) -> Optional[str]:
        """Node k > 0: the namespace to join (node 0's identity), or None to keep waiting.

        Raises:
            LaunchError: node 0's store belongs to another job (TCP: it is alive, not stale).
        """
        if not self.store.check(["zoo/job"]):
            return None
        held = json.loads(self.store.get("zoo/job"))
        if held["id"] in (self.job, self._joined):
            return held["id"]
        if held["token"] == self.token_hash and held["forming"]:
            self._joined = held["id"]  # maybe this job with a wrong config: node 0 names the keys
            return held["id"]
        if url_is_file:  # a stale file of an earlier run: node 0 will overwrite it
            self._stale_job = held["id"]
            return None
        why = ("a different DDP_CONFIG.JOB_TOKEN / ZOO_JOB_TOKEN"
               if held["token"] != self.token_hash else "a different config, and already running")
        k = self.topology.node_rank
        i = self.store.add("zoo/strangers", 1)
        self.store.set(f"zoo/stranger/{i}", json.dumps(
            {"job": self.job, "why": why, "node": k, "host": self.summary["host"]}))
        raise LaunchError(
            f"node {k}: the rendezvous at {self.topology.dist_url} is held by another job "
            f"(identity {held['id']}; this launcher's is {self.job}: {why}); use the same config "
            "and token as that job, or give this job its own DDP_CONFIG.DIST_URL port"
        )

    def beat(self) -> bool:
        """Say that this node's launcher is alive (called every second while its workers run):
        a second launcher of this node rank tells it from a dead node waiting to be re-run; and
        count the failures posted (:meth:`remote_failure`).

        Returns whether node 0's store answered within a few seconds. The requests run in a
        thread of their own on a connection of their own: a request to a store out of reach waits
        with no bound of its own (the store's timeout does not apply to a request already sent),
        and the launcher must stay free to stop its workers."""
        if self.store is None or not self.session:
            return True
        if self._store_lost:
            return False
        asked = time.monotonic()
        if self._beating is None or not self._beating.is_alive():
            self._beating = threading.Thread(target=self._beat_once, name="zoo-node-beat",
                                             daemon=True)
            self._beating.start()
        self._beating.join(max(1.0, min(5.0, self.silence_limit_s / 10)))
        return self.answered_at >= asked

    def _beat_once(self) -> None:
        try:
            if self._prober is None:
                self._prober = _own_connection(self.store)
            self._prober.add(self._key(f"alive/{self.topology.node_rank}"), 1)
            self._posted = self._prober.add(self._key("failures"), 0)
        except Exception:  # node 0 finished or died: the silence tells
            return
        self.answered_at = time.monotonic()

    def node_0_lost(self) -> Optional[dict]:
        """After :meth:`beat` found node 0's store silent: None while the silence is shorter than
        ``silence_limit_s``, else the failure to stop this node with (kind "lost", the message
        naming the store's address and the key), and the store is no longer asked."""
        silent = time.monotonic() - self.answered_at
        if silent < self.silence_limit_s:
            return None
        self._store_lost = True
        where = self.topology.dist_url.split("://", 1)[-1]
        return {"rank": -1, "node": 0, "host": where, "kind": "lost",
                "message": f"node {self.topology.node_rank}: node 0's rendezvous at {where} has "
                           f"not answered for {silent:.0f} s (DDP_CONFIG.{self.silence_key} = "
                           f"{self.silence_limit_s:g}): this node lost its network to node 0, or "
                           "node 0 stopped"}

    def _refuse_duplicate(self, plan: dict) -> None:
        """Node k > 0, left out of a running round whose node k is alive: leave a note for node 0
        and stop.

        Raises:
            LaunchError: always (one line naming the running node and what to do).
        """
        k = self.topology.node_rank
        hosts = plan.get("hosts") or []
        holder = hosts[k] if k < len(hosts) else "another host"
        i = self.store.add("zoo/strangers", 1)
        self.store.set(f"zoo/stranger/{i}", json.dumps(
            {"kind": "duplicate", "node": k, "host": self.summary["host"], "holder": holder}))
        raise LaunchError(
            f"node {k}: node 0 is already running this job at {self.topology.dist_url} with a "
            f"node {k} ({holder}) whose launcher is alive: is another launcher of node {k} "
            f"running? Stop this one, or give this node its own rank (DDP_CONFIG.WORLD_URLS / "
            f"WORLD_RANK, {NODE_RANK_ENV})"
        )

    def _post(self, plan: dict) -> None:
        self.store.set(self._key("plan"), json.dumps(plan))

    def _join(self, after: str = "") -> dict:
        """Node k > 0: register under node 0's current session (not ``after``, the round that
        failed) and wait for a plan that has us."""
        k = self.topology.node_rank
        deadline = time.monotonic() + self.timeout_s
        registered, left_out = after or None, False
        # When left out of a running round: (that round, node k's alive count when first seen).
        watched: Optional[Tuple[str, int]] = None
        is_file = self.topology.dist_url.startswith("file://")
        while True:
            try:
                job = self._check_job(is_file)
                if job and self.store.check([f"zoo/{job}/session"]):
                    self.session = self.store.get(f"zoo/{job}/session").decode()
                    if self.session != registered:  # a new round or run of node 0 (or stale file)
                        if not self.store.check([self._key("plan")]):  # a running one: no seat
                            self._register()
                        registered, left_out = self.session, False
                    if self.session != after and self.store.check([self._key("plan")]):
                        plan = json.loads(self.store.get(self._key("plan")))
                        if self.nonce in plan["nonces"]:
                            return plan
                        left_out = True
                        beats = self.store.add(self._key(f"alive/{k}"), 0)
                        if watched is None or watched[0] != self.session:
                            watched = (self.session, beats)
                        elif beats > watched[1]:  # node k of that round is alive: a duplicate
                            self._refuse_duplicate(plan)
            except LaunchError:
                raise
            except RuntimeError as e:  # c10d errors: node 0 went away mid-rendezvous
                if self.reconnect and time.monotonic() < deadline:
                    self._reopen(deadline)  # node 0's launcher died: wait for its re-run
                    continue
                raise LaunchError(
                    f"node {k}: lost node 0's rendezvous at {self.topology.dist_url} "
                    f"({_first_line(e)}); see node 0's output"
                ) from None
            if time.monotonic() >= deadline:
                if self._stale_job and not registered:
                    raise LaunchError(
                        f"node {k}: the rendezvous file {self.topology.dist_url} holds another "
                        f"job (identity {self._stale_job}; this launcher's is {self.job}) and node "
                        f"0 of this job did not start within {self.timeout_s:g}s; start node 0 "
                        "with the same config and token"
                    )
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

    def _reopen(self, deadline: float) -> None:
        """Connect to node 0's store again (a re-run node 0 listens on the same port).

        Raises:
            LaunchError: node 0 did not come back before ``deadline``.
        """
        self.store = None
        while True:
            left = max(1.0, deadline - time.monotonic())
            try:
                self.store, _ = open_store(self.topology.dist_url, host_it=False, timeout_s=left)
                break
            except LaunchError:
                raise
            except RuntimeError as e:  # the port answered but the store is not up yet
                if time.monotonic() >= deadline:
                    raise LaunchError(
                        f"node {self.topology.node_rank}: lost node 0's rendezvous at "
                        f"{self.topology.dist_url} and it did not come back ({_first_line(e)}); "
                        "run the same command on node 0 again") from None
                time.sleep(0.5)
        self._store_lost = False

    def _form(self, after: str = "") -> None:
        """One round of the handshake: sets ``plan``, ``topology`` and ``restarts``."""
        try:
            plan = self._host() if self.topology.node_rank == 0 else self._join(after)
        except BaseException:
            self.close()
            raise
        self.plan = plan
        if plan["error"]:
            self.close()
            raise LaunchError(plan["error"])
        if not after:  # the same warnings again on every restart would only repeat them
            for w in plan["warnings"]:
                logger.warning("%s", w)
        self.restarts = plan.get("restarts", 0)
        # A new connection per round; a beat still waiting on the last round's is left behind.
        self._prober, self._beating, self.answered_at = None, None, time.monotonic()
        self._posted = 0  # the last round's failures are not this round's
        k = self.topology.node_rank
        self.topology = dataclasses.replace(
            self.topology, world_size=plan["world_size"], rank_offset=plan["offsets"][k]
        )

    def reform(self) -> None:
        """After a failure: meet the other nodes again in a new round (node 0 opens it), as the
        job's next restart. Raises LaunchError as the first round does."""
        failed, self.restarts = self.session, self.restarts + 1
        if self.topology.node_rank != 0 and (self.store is None or self._store_lost):
            self._reopen(time.monotonic() + self.timeout_s)
        self._form(after=failed)

    def __enter__(self) -> "NodeRendezvous":
        self._form()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- failures and shutdown
    def pg_store(self) -> Optional[dist.Store]:
        """The workers' view of the store (what ``worker_store`` gives them); None once closed."""
        lost = self.store is None or self._store_lost
        return None if lost else pg_prefix(self.session, self.store)

    def record_failure(self, rank: int, kind: str, message: str) -> None:
        """Tell the other nodes that ``rank`` failed (kind "died": killed or exited; "error";
        "hung": ``message`` is the heartbeat's report line, naming the silent rank)."""
        record = {"rank": rank, "node": self.topology.node_rank, "host": self.summary["host"],
                  "kind": kind, "message": message}
        if self._store_lost:  # nobody to tell, and asking would wait for INIT_TIMEOUT
            return
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
            self._note_strangers()
            n = self.store.add(self._key("failures"), 0)
            return [json.loads(self.store.get(self._key(f"failure/{i}"))) for i in range(1, n + 1)]
        except Exception:
            self._store_lost = True  # node 0 finished or died; torch's timeouts take over
            return []

    def remote_failure(self) -> Optional[dict]:
        """The root cause if another node has posted a failure, else None. Node 0 asks its own
        store; the others ask only when the last :meth:`beat` counted a failure."""
        if self.topology.node_rank != 0 and not self._posted:
            return None
        if any(f["node"] != self.topology.node_rank for f in self.failures()):
            return self.root_cause(wait_s=1.0)
        return None

    def root_cause(self, wait_s: float = REPORT_GRACE_S) -> Optional[dict]:
        """The first hung rank reported (the others died or failed waiting for it), else the first
        rank that died (else failed) anywhere in the job; waits briefly for reports."""
        deadline = time.monotonic() + wait_s
        while True:
            found = self.failures()
            died = [f for f in found if f["kind"] == "hung"] or [
                f for f in found if f["kind"] == "died"]
            if died or time.monotonic() >= deadline:
                return (died or found or [None])[0]
            time.sleep(0.2)

    def close(self) -> None:
        """Say this node is done; node 0 keeps the store up a little for nodes still reporting."""
        if self.store is None:
            return
        try:
            if self._store_lost:  # asking would wait for INIT_TIMEOUT
                raise ConnectionError
            self._note_strangers()
            # A launcher left out of the round (a second one of a running node) is no member.
            member = self.topology.node_rank == 0 or self.nonce in self.plan.get("nonces", ())
            if self.session and member:
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
def agree_in_process_group(spec: JobSpec) -> None:
    """For ranks started by torchrun / Slurm: compare configs and versions over the new group.

    Raises:
        LaunchError: naming the ranks and keys that differ.
    """
    summary = node_summary(spec.agreement, spec.local_procs, spec.backend)
    light = {k: v for k, v in summary.items() if k != "config"}
    gathered: List[Optional[dict]] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, light)
    if len({(g["config_hash"], g["zoo"], g["backend"]) for g in gathered}) > 1:
        dist.all_gather_object(gathered, summary)
    else:
        gathered = [dict(g, config={}) for g in gathered]
    errors, warnings = compare_summaries(gathered, lambda i: f"rank {i} ({gathered[i]['host']})")
    if dist.get_rank() == 0:
        local = "" if errors else local_differences(gathered, lambda i: f"rank {i}")
        for w in [*warnings, local] if local else warnings:
            logger.warning("%s", w)
    if errors:
        raise LaunchError("; ".join(errors))
