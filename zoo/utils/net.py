"""Who is this host? Its names, every address on every interface, the interface that reaches a peer.

Everything here works without a default route and sends no packets: addresses come from the
interface list (``ip -j addr``, else the ``SIOCGIFCONF`` ioctl and ``/proc/net/if_inet6``, else name
resolution on non-Linux systems), and "is this address mine?" is answered by trying to bind to it.
"""

from __future__ import annotations

import array
import ipaddress
import json
import shutil
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass
from functools import lru_cache
from typing import Dict, List, Optional, Set


@dataclass(frozen=True)
class HostIdentity:
    """This host's names and addresses, as used for matching ``WORLD_URLS`` entries."""

    hostname: str
    fqdn: str
    addresses: Dict[str, str]  # address -> interface name ("" when unknown)

    def names(self) -> Set[str]:
        short = self.hostname.split(".")[0]
        return {n.lower() for n in (self.hostname, self.fqdn, short) if n}

    def describe(self) -> str:
        """``addresses 10.0.0.2, fe80::1, hostname node-b`` for error messages."""
        addrs = ", ".join(sorted(self.addresses, key=_sort_key)) or "none found"
        name = self.hostname if self.fqdn in ("", self.hostname, "localhost") else (
            f"{self.hostname} / {self.fqdn}")
        return f"addresses {addrs}, hostname {name}"


def _sort_key(addr: str):
    ip = ipaddress.ip_address(addr.split("%")[0])
    return (ip.version, ip.is_loopback, ip.is_link_local, str(ip))


def _from_ip_command() -> Dict[str, str]:
    """All addresses from iproute2's JSON output (includes secondary addresses)."""
    ip = shutil.which("ip")
    if not ip:
        return {}
    try:
        out = subprocess.run([ip, "-j", "addr", "show"], capture_output=True, text=True,
                             timeout=5, check=True).stdout
        links = json.loads(out)
    except (OSError, subprocess.SubprocessError, ValueError):
        return {}
    found = {}
    for link in links:
        for info in link.get("addr_info", []):
            if info.get("local"):
                found[_normalise(info["local"])] = link.get("ifname", "")
    return found


def _from_ioctl() -> Dict[str, str]:
    """IPv4 addresses from SIOCGIFCONF and IPv6 ones from /proc/net/if_inet6 (Linux)."""
    found: Dict[str, str] = {}
    if not sys.platform.startswith("linux"):  # the ioctl number and struct layout are Linux's
        return found
    try:
        import fcntl

        siocgifconf, entry = 0x8912, 40  # struct ifreq is 40 bytes on 64-bit Linux
        buf = array.array("B", bytes(entry * 128))
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            req = struct.pack("iL", len(buf), buf.buffer_info()[0])
            size = struct.unpack("iL", fcntl.ioctl(s.fileno(), siocgifconf, req))[0]
        raw = buf.tobytes()[:size]
        for i in range(0, size, entry):
            name = raw[i:i + 16].split(b"\0", 1)[0].decode(errors="replace")
            found[socket.inet_ntoa(raw[i + 20:i + 24])] = name.split(":")[0]
    except (ImportError, OSError, struct.error):
        pass
    try:
        with open("/proc/net/if_inet6", encoding="ascii") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6:
                    addr = str(ipaddress.IPv6Address(bytes.fromhex(parts[0])))
                    found[addr] = parts[5]
    except (OSError, ValueError):
        pass
    return found


def _from_names(names) -> Dict[str, str]:
    found = {}
    for name in names:
        for addr in resolve(name):
            found.setdefault(addr, "")
    return found


def _normalise(addr: str) -> str:
    """Canonical text of an IP address (``::ffff:10.0.0.1`` -> ``10.0.0.1``, scope id dropped)."""
    ip = ipaddress.ip_address(addr.split("%")[0].strip("[]"))
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return str(ip)


@lru_cache(maxsize=1)
def host_identity() -> HostIdentity:
    """This host's hostname, FQDN and all its addresses (cached: one look-up per process)."""
    hostname = socket.gethostname()
    try:
        fqdn = socket.getfqdn()
    except OSError:
        fqdn = hostname
    # Elsewhere (macOS, Windows) only name resolution lists addresses; is_local() still binds.
    addresses = _from_ip_command() or _from_ioctl()
    for addr, ifname in _from_names({hostname, fqdn, "localhost"}).items():
        addresses.setdefault(addr, ifname)
    addresses.setdefault("127.0.0.1", "lo" if sys.platform.startswith("linux") else "")
    return HostIdentity(hostname=hostname, fqdn=fqdn, addresses=addresses)


def is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.split("%")[0].strip("[]"))
    except ValueError:
        return False
    return True


@lru_cache(maxsize=256)
def resolve(host: str) -> tuple:
    """Addresses ``host`` (a name or an IP) resolves to, normalised; () when it does not resolve."""
    host = host.strip().strip("[]")
    if is_ip(host):
        return (_normalise(host),)
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return ()
    return tuple(dict.fromkeys(_normalise(info[4][0]) for info in infos))


def is_loopback(addr: str) -> bool:
    return ipaddress.ip_address(addr.split("%")[0]).is_loopback


def can_bind(addr: str) -> bool:
    """True if a socket can bind to ``addr`` here, i.e. the address belongs to this host."""
    ip = ipaddress.ip_address(addr.split("%")[0])
    if ip.is_unspecified:
        return False
    family = socket.AF_INET6 if ip.version == 6 else socket.AF_INET
    try:
        target = socket.getaddrinfo(addr, 0, family, socket.SOCK_STREAM)[0][4]
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind(target)
    except OSError:
        return False
    return True


def is_local(addr: str, me: Optional[HostIdentity] = None) -> bool:
    """Whether ``addr`` (an IP) is one of this host's addresses."""
    me = me or host_identity()
    addr = _normalise(addr)
    return addr in me.addresses or can_bind(addr)


def is_this_host(entry: str, me: Optional[HostIdentity] = None) -> bool:
    """Whether a WORLD_URLS entry (IP or hostname) names this host."""
    me = me or host_identity()
    entry = entry.strip().strip("[]")
    if entry.lower() in me.names():
        return True
    return any(is_local(a, me) for a in resolve(entry))


def same_host(a: str, b: str, me: Optional[HostIdentity] = None) -> bool:
    """Whether two hosts (IPs or names) are one machine, judged by names and resolved addresses."""
    a, b = a.strip().strip("[]"), b.strip().strip("[]")
    if a.lower() == b.lower():
        return True
    ra, rb = set(resolve(a)), set(resolve(b))
    if ra & rb:
        return True
    # Both names may resolve to different addresses of this very host (e.g. a hostname mapped to
    # 127.0.1.1 in /etc/hosts and the LAN address): that is still one machine.
    return bool(ra and rb) and all(is_local(x, me) for x in ra | rb)


def source_address_for(peer: str) -> Optional[str]:
    """The local address the kernel would use to reach ``peer`` (no packet is sent)."""
    addrs = resolve(peer)
    if not addrs:
        return None
    family = socket.AF_INET6 if ":" in addrs[0] else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((addrs[0], 9))  # UDP connect only selects a route
            return _normalise(s.getsockname()[0])
    except OSError:
        return None


def interface_for(peer: str) -> Optional[str]:
    """Name of the network interface that reaches ``peer``, or None when it cannot be told."""
    src = source_address_for(peer)
    if src is None:
        return None
    if is_loopback(src):
        return "lo" if sys.platform.startswith("linux") else None
    return host_identity().addresses.get(src) or None


def port_is_free(port: int) -> bool:
    """Whether a TCP server could listen on ``port`` on all IPv4 interfaces of this host."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        if sys.platform != "win32":  # as a server would: a port in TIME_WAIT is still usable
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def format_hostport(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def local_addresses() -> List[str]:
    """All addresses of this host, IPv4 first, loopback and link-local last."""
    return sorted(host_identity().addresses, key=_sort_key)
