"""Two "hosts" on this machine joined by a shaped network link, for ``zoo-benchmark scaling
--nodes 2``.

Two network namespaces, each with its own address on one end of a veth pair. Both ends are shaped
with ``tc``: a token-bucket filter (``tbf``) caps the rate, and ``netem`` adds the one-way delay
where the kernel has it (it is a module some kernels lack: then the link is rate-limited only and
:class:`Link` says so in ``delay_note``). Needs root and iproute2; anything else stops with one
line saying what is missing.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Iterator, List


class LinkError(RuntimeError):
    """The shaped link cannot be made here (no root, no iproute2/tc, namespaces refused)."""


@dataclass
class Link:
    """The two ends: namespace names and addresses, the shaping applied, what was measured."""

    namespaces: List[str]
    addresses: List[str]
    rate: str
    delay_ms: float
    delay_note: str = ""
    measured_mb_per_s: float = 0.0

    def command(self, node: int, argv: List[str]) -> List[str]:
        """``argv`` run inside node ``node``'s namespace."""
        return ["ip", "netns", "exec", self.namespaces[node], *argv]


def _ip(*args: str) -> None:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise LinkError(f"'ip {' '.join(args)}' failed: {(r.stderr or r.stdout).strip()}")


def _shape(ns: str, dev: str, rate: str, delay_ms: float) -> str:
    """Shape ``dev``: netem (delay + rate) when the kernel has it, else tbf (rate only).

    Returns:
        "" when the delay is applied, else a note saying why not.
    """
    base = ["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", dev, "root"]
    if delay_ms > 0:
        netem = subprocess.run([*base, "netem", "delay", f"{delay_ms}ms", "rate", rate],
                               capture_output=True, text=True, timeout=30)
        if netem.returncode == 0:
            return ""
        note = (f"no added delay: tc netem is not available in this kernel "
                f"({netem.stderr.strip() or 'refused'}); the link is rate-limited only")
    else:
        note = ""
    # A burst of 256 KB holds a few jumbo-free TCP windows without exceeding the rate on average.
    tbf = subprocess.run([*base, "tbf", "rate", rate, "burst", "256kb", "latency", "20ms"],
                         capture_output=True, text=True, timeout=30)
    if tbf.returncode != 0:
        raise LinkError(f"tc cannot shape {dev} to {rate}: {tbf.stderr.strip()}")
    return note


def _check_tools() -> None:
    if sys.platform != "linux":
        raise LinkError("--nodes 2 needs Linux network namespaces")
    if os.geteuid() != 0:
        raise LinkError("--nodes 2 makes network namespaces and shapes them with tc: run as root")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            raise LinkError(f"--nodes 2 needs '{tool}' (Debian: apt-get install iproute2)")


@contextlib.contextmanager
def shaped_link(rate: str = "1gbit", delay_ms: float = 0.5,
                subnet: str = "10.231.7") -> Iterator[Link]:
    """Two namespaces joined by a veth pair shaped to ``rate`` and ``delay_ms`` each way.

    Raises:
        LinkError: not root, no ``ip``/``tc``, or the kernel refused a step (one line).
    """
    _check_tools()
    tag = os.getpid() % 100000
    names, veths = [f"zoob{tag}a", f"zoob{tag}b"], [f"zb{tag}a", f"zb{tag}b"]
    addrs = [f"{subnet}.1", f"{subnet}.2"]
    created: List[str] = []
    try:
        for name in names:
            _ip("netns", "add", name)
            created.append(name)
        _ip("link", "add", veths[0], "type", "veth", "peer", "name", veths[1])
        notes = []
        for name, veth, addr in zip(names, veths, addrs):
            _ip("link", "set", veth, "netns", name)
            _ip("-n", name, "addr", "add", f"{addr}/24", "dev", veth)
            _ip("-n", name, "link", "set", veth, "up")
            _ip("-n", name, "link", "set", "lo", "up")
            notes.append(_shape(name, veth, rate, delay_ms))
        link = Link(names, addrs, rate, delay_ms if not notes[0] else 0.0, notes[0])
        link.measured_mb_per_s = measure_rate(link)
        yield link
    finally:
        for name in created:  # deleting a namespace deletes its end of the veth pair too
            subprocess.run(["ip", "netns", "del", name], check=False, capture_output=True)


# A receiver in node 1 and a sender in node 0: MB/s over the link (a check that shaping works).
_RECEIVE = ("import socket,sys;s=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
            "socket.SO_REUSEADDR,1);s.bind((sys.argv[1],int(sys.argv[2])));s.listen();"
            "print('ready',flush=True);c,_=s.accept()\nwhile c.recv(1<<20):pass")
_SEND = ("import socket,sys,time;s=socket.create_connection((sys.argv[1],int(sys.argv[2])));"
         "b=bytes(1<<20);n=int(sys.argv[3]);t=time.perf_counter()\nfor _ in range(n):s.sendall(b)\n"
         "s.shutdown(socket.SHUT_WR);s.recv(1);print(n/(time.perf_counter()-t))")


def measure_rate(link: Link, megabytes: int = 64, port: int = 29400) -> float:
    """MB/s of one TCP stream from node 0 to node 1 (MB = 2**20 bytes)."""
    recv = subprocess.Popen(link.command(1, [sys.executable, "-c", _RECEIVE, link.addresses[1],
                                             str(port)]), stdout=subprocess.PIPE, text=True)
    try:
        recv.stdout.readline()  # "ready"
        out = subprocess.run(link.command(0, [sys.executable, "-c", _SEND, link.addresses[1],
                                              str(port), str(megabytes)]),
                             capture_output=True, text=True, timeout=120)
        if out.returncode != 0:
            raise LinkError(f"cannot send over the shaped link: {out.stderr.strip()[-300:]}")
        return round(float(out.stdout.strip()), 1)
    finally:
        recv.kill()
        recv.wait()


def free_port() -> int:
    """A TCP port free on this host (namespaces have their own ports, so it is free there too)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_all(procs: List[subprocess.Popen], timeout: float) -> List[str]:
    """Wait for every process; kill the rest when one fails or time runs out. Their outputs."""
    deadline = time.monotonic() + timeout
    while any(p.poll() is None for p in procs):
        if time.monotonic() > deadline or any(p.poll() not in (None, 0) for p in procs):
            for p in procs:
                if p.poll() is None:
                    p.kill()
            break
        time.sleep(0.2)
    return [p.communicate()[0] or "" for p in procs]
