"""The c10d store the nodes of a job meet at: node 0 hosts it (a ``TCPStore`` on DIST_URL's port,
or a ``FileStore`` at a ``file://`` path on a shared file system), the other nodes' launchers and
every worker connect to it, and each wait is bounded, ending in one line naming the address and
``DDP_CONFIG`` key (:mod:`zoo.launch.rendezvous` runs the node rendezvous on it)."""

from __future__ import annotations

import datetime
import logging
import os
import socket
import threading
import time
from typing import Tuple

import torch.distributed as dist

from ..utils import net
from .topology import LaunchError, file_url_path, parse_tcp_url

logger = logging.getLogger(__name__)


# A client that waits this long for node 0's store to accept or answer says so, once (a store
# that is up answers at once).
_SAY_SILENT_AFTER_S = 5.0


def _wait_for_port(host: str, port: int, timeout_s: float) -> None:
    """Wait until node 0's store accepts TCP connections, or fail naming address and port.

    A wait longer than ``_SAY_SILENT_AFTER_S`` says so once (a node started before node 0 would
    otherwise print nothing until node 0 comes up or the timeout ends it)."""
    start = time.monotonic()
    deadline = start + timeout_s
    last = "no answer"
    said = False
    where = net.format_hostport(host, port)
    while True:
        try:
            with socket.create_connection((host, port), timeout=min(2.0, timeout_s)):
                if said:
                    logger.info("node 0's rendezvous at %s answered after %.0fs", where,
                                time.monotonic() - start)
                return
        except OSError as e:
            last = e.strerror or type(e).__name__
        now = time.monotonic()
        if not said and now - start >= _SAY_SILENT_AFTER_S and now < deadline:
            said = True
            logger.info("waiting for node 0's rendezvous at %s (%s): start the same command on "
                        "node 0; waiting %.0fs more (DDP_CONFIG.INIT_TIMEOUT)", where,
                        last.lower(), deadline - now)
        if now >= deadline:
            raise LaunchError(
                f"node 0's rendezvous at {where} did not answer within {timeout_s:g}s "
                f"({last.lower()}): start the same command on node 0, check DDP_CONFIG.DIST_URL, "
                f"that this node can reach {host} and that port {port} is open there"
            )
        time.sleep(0.5)


def _connect(host: str, port: int, timeout_s: float, wait_s: float) -> dist.Store:
    """A client of the TCPStore at ``host:port`` (its own timeout ``timeout_s``), made within
    ``wait_s``.

    The store's constructor waits for the server's answer to its handshake with no timeout, in
    C++, where no Python signal handler runs: a program on that port that accepts connections and
    never answers would hold the launcher for ever, deaf to SIGTERM. So it runs in a daemon
    thread; the calling thread waits for it with a timeout (an interruptible wait) and leaves it
    behind after ``wait_s`` (it ends with the process).

    Raises:
        LaunchError: the port accepts connections but nothing answered as a store in time.
    """
    made: dict = {}

    def connect() -> None:
        try:
            # The constructor's own retries end with the wait; the store's requests get the
            # whole timeout.
            store = dist.TCPStore(host, port, is_master=False,
                                  timeout=datetime.timedelta(seconds=wait_s))
            store.set_timeout(datetime.timedelta(seconds=timeout_s))
            made["store"] = store
        except BaseException as e:  # handed to the waiting thread
            made["error"] = e

    thread = threading.Thread(target=connect, name="zoo-store-connect", daemon=True)
    thread.start()
    where = net.format_hostport(host, port)
    thread.join(min(wait_s, _SAY_SILENT_AFTER_S))
    if thread.is_alive() and wait_s > _SAY_SILENT_AFTER_S:
        logger.info("%s accepts connections but has not answered as a rendezvous for %gs; "
                    "waiting up to DDP_CONFIG.INIT_TIMEOUT = %gs", where, _SAY_SILENT_AFTER_S,
                    timeout_s)
        thread.join(wait_s - _SAY_SILENT_AFTER_S)
    if thread.is_alive():
        raise LaunchError(
            f"{where} accepts connections but did not answer as a zoo/torch rendezvous within "
            f"{timeout_s:g}s (DDP_CONFIG.INIT_TIMEOUT): another program holds that port on node 0; "
            "choose another port for DDP_CONFIG.DIST_URL (the same on every node)"
        )
    if "error" in made:
        raise made["error"]
    return made["store"]


def open_store(url: str, host_it: bool, timeout_s: float,
               any_port: bool = False) -> Tuple[dist.Store, str]:
    """Host (node 0) or connect to the store at ``url``; returns ``(store, url with real port)``.

    A client waits at most ``timeout_s`` in all for the port to accept connections and for the
    store there to answer (a LaunchError names the address either way).

    ``any_port`` (a one-node job, which no other node has to find): when the port is taken by
    the time the store listens (another job started at the same moment took it since the
    launcher found it free), the store listens on a free port instead of failing.
    """
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
        deadline = time.monotonic() + timeout_s
        _wait_for_port(host, port, timeout_s)
        # The port answered: the store's handshake gets what is left of the timeout (a store
        # answers in milliseconds), and a few seconds when the port answered only at the end.
        wait_s = max(deadline - time.monotonic(), min(timeout_s, _SAY_SILENT_AFTER_S))
        return _connect(host, port, timeout_s, wait_s), url
    try:
        store = dist.TCPStore(host, port, is_master=True, wait_for_workers=False, timeout=timeout)
    except (RuntimeError, OSError) as e:
        text = str(e)
        in_use = "EADDRINUSE" in text or "already in use" in text
        if in_use and any_port and port:
            logger.info("port %d was taken as the job started; one node, so using a free port",
                        port)
            return open_store(f"tcp://{net.format_hostport(host, 0)}", True, timeout_s)
        if in_use:
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
    return pg_prefix(session, store)


def pg_prefix(session: str, store: dist.Store) -> dist.Store:
    """``store`` under the process-group prefix of the run ``session``."""
    return dist.PrefixStore(f"zoo/{session}/pg/", store)
