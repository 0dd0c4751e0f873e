"""Hung-rank detection: a per-rank heartbeat through the job's store (``DDP_CONFIG.HANG_TIMEOUT``).

Every rank of a multi-process job runs one daemon thread that, every few seconds:

1. writes its beat, ``beat/<rank>`` = ``{seq, node, host, epoch, iter, done}`` (one ``set``);
2. reads the beat of the next live rank in a ring (``rank + 1``, skipping ranks that finished), so
   every rank is watched by exactly one other (one ``get``);
3. checks whether any rank has posted a hang report (one ``check``).

Three small requests per rank per interval: the store's load grows with the number of ranks only.

A watched beat that has not changed for ``HANG_TIMEOUT`` seconds, by the watcher's own clock (so
clocks of different hosts never get compared), makes the watcher post one report under ``report``
(``compare_set``: the first report wins) and end its process with :data:`HANG_EXIT_CODE`; every
other rank sees the report at its next beat and ends the same way. The ranks on the silent rank's
node SIGKILL it first when it is their sibling (:func:`kill_if_sibling`): a SIGSTOPped process
waits out every SIGTERM.
Under zoo's launcher the launcher reads the report (:func:`read_report`) and prints it as the
job's root cause; under torchrun / Slurm the first process of each node prints it.

Why a thread and not beats from the training loop: a SIGSTOPped process, a lost node, or a process
frozen with the GIL held stops every thread, the heartbeat's too, so the thread catches them; and
a healthy rank in a long phase (the first step, torch.compile, validation, precise BN, a slow
checkpoint write, data-loader start) keeps beating without each phase having to. The main thread
only records its progress (:func:`note_step`, one attribute write per step), which the beat
carries so the report can say where the silent rank stopped. What it does not catch: a rank whose
main thread is stuck inside a driver or collective call that released the GIL keeps beating; its
peers then wait in a collective, which the process group's timeout (``INIT_TIMEOUT``) ends. A
progress check could not tell that rank from the peers waiting for it (they stall at the same step).
"""

from __future__ import annotations

import datetime
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from typing import Optional

logger = logging.getLogger(__name__)

# A rank that ends because the job has a hung rank exits with this code (like timeout(1)); it is an
# ordinary failure for restarts.
HANG_EXIT_CODE = 124

# Where the heartbeat keys live inside the store the process group was made with.
PREFIX = "zoo/hb/"
REPORT_KEY = "report"

_current: Optional["Heartbeat"] = None


def beat_interval(timeout_s: float) -> float:
    """Seconds between beats: a tenth of the timeout, within [0.5, 3] s.

    A silent rank is reported at most two intervals after HANG_TIMEOUT (one for its last beat to
    be seen, one for the next look), so the job ends within HANG_TIMEOUT + 10 s with the launcher's
    few seconds to stop the processes.
    """
    return min(3.0, max(0.5, timeout_s / 10.0))


def _attempt_prefix() -> str:
    # torchrun restarts the workers with the same store: each attempt gets its own keys, so a
    # report of the last attempt does not end the next one.
    return PREFIX + os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") + "/"


def heartbeat_store(store, timeout_s: float):
    """A private connection to ``store`` (so the thread never shares one with the process group),
    with a timeout of ``timeout_s``, under the heartbeat's prefix."""
    import torch.distributed as dist

    try:
        own = store.clone()
        own.set_timeout(datetime.timedelta(seconds=max(1.0, timeout_s)))
    except (RuntimeError, AttributeError):  # a store type without clone: share it (thread-safe)
        own = store
    return dist.PrefixStore(_attempt_prefix(), own)


def read_report(store) -> Optional[str]:
    """The hang report posted through ``store`` (the process group's store), else None."""
    import torch.distributed as dist

    try:
        report = read_report_from(dist.PrefixStore(_attempt_prefix(), store))
    except Exception:  # the store is gone: there is nothing to read
        return None
    return report["line"] if report else None


def note_step(epoch: int, iteration: int) -> None:
    """Record the last finished step (1-based epoch and iteration in it) for the heartbeat."""
    hb = _current
    if hb is not None:
        hb.step = (epoch, iteration)


def describe(rank: int, beat: Optional[dict], silent_s: float) -> str:
    """The one report line for ``rank``, silent for ``silent_s`` seconds; ``beat`` is its last."""
    if beat is None:
        return (f"rank {rank} sent no heartbeat for {silent_s:.0f} s, none since the job started "
                "(DDP_CONFIG.HANG_TIMEOUT)")
    where = f"node {beat['node']}, {beat['host']}"
    # The beat carries the step finished by the time it was sent: at most one interval old.
    step = (f"the last step it reported was epoch {beat['epoch']} iter {beat['iter']}"
            if beat["epoch"] else "it had reported no finished training step")
    return (f"rank {rank} ({where}) sent no heartbeat for {silent_s:.0f} s; {step} "
            "(DDP_CONFIG.HANG_TIMEOUT)")


class Heartbeat:
    """The heartbeat thread of one rank (see the module docstring).

    Args:
        store: The store the process group was made with (cloned here, not used directly).
        rank, world_size, node: This rank, the job's ranks, this node's rank.
        timeout_s: ``DDP_CONFIG.HANG_TIMEOUT``.
        announce: Print the report as an ``error:`` line before exiting (no launcher of zoo's
            reads it: torchrun, Slurm).
    """

    def __init__(self, store, rank: int, world_size: int, node: int, timeout_s: float,
                 announce: bool = False) -> None:
        self.rank, self.world_size, self.node = rank, world_size, node
        self.timeout_s, self.announce = timeout_s, announce
        self.interval = beat_interval(timeout_s)
        self.store = heartbeat_store(store, timeout_s)
        self.host, self.pid = socket.gethostname(), os.getpid()
        self.step = (0, 0)
        self._seq = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="zoo-heartbeat", daemon=True)
        # The watched rank, its last beat (raw bytes and parsed), and when it last changed.
        self._target = (rank + 1) % world_size
        self._seen: Optional[bytes] = None
        self._beat: Optional[dict] = None
        self._changed = time.monotonic()
        self._store_error_logged = False

    # -- life cycle
    def start(self) -> "Heartbeat":
        self._send(done=False)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop beating and mark this rank done, so its watcher does not take it for hung."""
        self._stop.set()
        self._thread.join(timeout=self.interval + 5)
        self._send(done=True)

    # -- one round
    def _beat_text(self, done: bool) -> str:
        self._seq += 1
        return json.dumps({"seq": self._seq, "node": self.node, "host": self.host, "pid": self.pid,
                           "epoch": self.step[0], "iter": self.step[1], "done": done})

    def _send(self, done: bool) -> None:
        try:
            self.store.set(f"beat/{self.rank}", self._beat_text(done))
        except Exception as e:  # the store went away; the launcher's own checks handle that
            self._log_store_error(e)

    def _log_store_error(self, e: Exception) -> None:
        if not self._store_error_logged:
            self._store_error_logged = True
            logger.warning("heartbeat: the job's store did not answer (%s)",
                           str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__)

    def _run(self) -> None:
        last_round = time.monotonic()
        while not self._stop.wait(self.interval):
            now = time.monotonic()
            if now - last_round > 2 * self.interval + 2:
                # This process itself was paused, or the store was slow: the watched rank may have
                # beaten meanwhile unseen, so its silence is judged from now on.
                self._changed = now
            last_round = now
            try:
                self.store.set(f"beat/{self.rank}", self._beat_text(done=False))
                report = read_report_from(self.store)
                if report is None:
                    report = self._watch(now)
            except Exception as e:  # the store did not answer: nothing was seen this round
                self._log_store_error(e)
                self._changed = time.monotonic()
                continue
            if report is not None:
                self._end(report)

    def _watch(self, now: float) -> Optional[dict]:
        """Look at the watched rank's beat; returns the posted report once it is silent too long."""
        while self._target != self.rank:
            key = f"beat/{self._target}"
            # check() only until the key exists: then one get() per round.
            raw = self.store.get(key) if self._seen or self.store.check([key]) else None
            if raw is not None and raw != self._seen:
                self._seen, self._beat, self._changed = raw, json.loads(raw), now
            if self._beat is not None and self._beat["done"]:
                # That rank finished normally: watch the one after it.
                self._target = (self._target + 1) % self.world_size
                self._seen, self._beat, self._changed = None, None, now
                continue
            silent = now - self._changed
            if silent < self.timeout_s:
                return None
            beat = self._beat or {}
            report = {"line": describe(self._target, self._beat, silent), "rank": self._target,
                      "node": beat.get("node"), "host": beat.get("host"), "pid": beat.get("pid")}
            # The first report wins: a second watcher that caught another rank reads it back.
            return json.loads(self.store.compare_set(REPORT_KEY, "", json.dumps(report)))
        return None

    def _end(self, report: dict) -> None:
        """End this process: the job has a hung rank (ours is blocked waiting for it, or next).
        The ranks on the silent rank's node kill it first, if it is their sibling."""
        from ..utils.logger import write_to_log_file

        line = report["line"]
        killed = (report["pid"] and report["node"] == self.node and report["host"] == self.host
                  and kill_if_sibling(report["pid"]))
        write_to_log_file(f"hung rank: {line}; ending this process (rank {self.rank})"
                          + (f", after killing rank {report['rank']}" if killed else ""))
        local = os.environ.get("LOCAL_RANK", os.environ.get("SLURM_LOCALID", "0"))
        if self.announce and local == "0":  # one line per node, as zoo.cli.job does
            print(f"error: {line}", file=sys.stderr, flush=True)
        logging.shutdown()
        os._exit(HANG_EXIT_CODE)


def read_report_from(hb_store) -> Optional[dict]:
    """The report (``line``, and the silent rank's ``rank``, ``node``, ``host``, ``pid``) under an
    already-prefixed heartbeat store, else None."""
    if hb_store.check([REPORT_KEY]):
        return json.loads(hb_store.get(REPORT_KEY))
    return None


def kill_if_sibling(pid: int) -> bool:
    """SIGKILL ``pid`` if it is a process of this machine started by our parent (the launcher or
    torchrun's agent), i.e. a stopped worker of this node; True if it was killed.

    A SIGSTOPped process ignores the SIGTERM launchers send first (it stays pending), and torchrun
    waits 30 s before its SIGKILL; the parent check makes sure no unrelated process is touched.
    """
    try:
        with open(f"/proc/{pid}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        # Orphans (parent 1, a reaper) have no launcher in common with us: kill nothing then.
        if ppid != os.getppid() or ppid == 1 or pid == os.getpid():
            return False
        os.kill(pid, signal.SIGKILL)
        return True
    except (OSError, ValueError, IndexError):
        return False


def start(store, rank: int, world_size: int, node: int, announce: bool, timeout_s: float,
          init_timeout_s: float) -> Optional[Heartbeat]:
    """Start this rank's heartbeat when the job has several ranks and ``timeout_s``
    (``DDP_CONFIG.HANG_TIMEOUT``, ``JobSpec.hang_timeout_s``) is on; ``init_timeout_s`` is the
    process group's timeout, only compared with it."""
    global _current
    if timeout_s <= 0 or world_size <= 1:
        return None
    if store is None:  # env:// (torchrun): the store init_process_group made
        import torch.distributed as dist

        store = dist.distributed_c10d._get_default_store()
    if rank == 0 and timeout_s >= init_timeout_s:
        logger.warning("DDP_CONFIG.HANG_TIMEOUT (%g s) is not below INIT_TIMEOUT (%g s): a hung "
                       "rank will end the job through the collective timeout, without its name",
                       timeout_s, init_timeout_s)
    _current = Heartbeat(store, rank, world_size, node, timeout_s, announce).start()
    if rank == 0:
        logger.info("heartbeat: every %.1f s through the job's store; a rank silent for %g s ends "
                    "the job (DDP_CONFIG.HANG_TIMEOUT)", _current.interval, timeout_s)
    return _current


def stop(hb: Optional[Heartbeat]) -> None:
    """Stop ``hb`` (from :func:`start`; None is fine)."""
    global _current
    if hb is not None:
        hb.stop()
    _current = None
