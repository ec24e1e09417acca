"""Host address resolution, as Monarch's `monarch.tools.network`.

`AddrType` picks the address family `SPMDActor.get_host_port` answers with; `get_ipaddr`
resolves a hostname to an IP address that can carry TCP (IPv6 first by default), skipping
link-local addresses, which other processes cannot reach in most environments.
"""

from __future__ import annotations

import ipaddress
import socket
from enum import Enum, auto

__all__ = ["AddrType", "get_ipaddr", "get_sockaddr"]


class AddrType(Enum):
    """Which address family to resolve: `Default` tries IPv6, then IPv4."""

    Default = auto()
    IPv4 = auto()
    IPv6 = auto()


_FAMILIES = {
    AddrType.Default: (socket.AF_INET6, socket.AF_INET),
    AddrType.IPv4: (socket.AF_INET,),
    AddrType.IPv6: (socket.AF_INET6,),
}


def get_ipaddr(hostname: str, port: int, addr_type: AddrType = AddrType.Default) -> str:
    """The first IP address of `hostname` in the families `addr_type` allows.

    Returns:
        The bare address (`127.0.0.1`, `::1`).

    Raises:
        ValueError: `addr_type` is not an `AddrType`.
        RuntimeError: the hostname resolves to no usable address in those families.
    """
    families = _FAMILIES.get(addr_type) if isinstance(addr_type, AddrType) else None
    if families is None:
        raise ValueError(f"Unknown AddrType: {addr_type!r}")
    for family in families:
        if (addr := _resolve(hostname, port, family)) is not None:
            return addr
    raise _unresolvable(hostname)


def get_sockaddr(hostname: str, port: int) -> str:
    """`hostname:port` as a socket address: `[ipv6]:port` when IPv6 resolves, else `ipv4:port`.

    Raises:
        RuntimeError: the hostname resolves to no usable address.
    """
    if (addr := _resolve(hostname, port, socket.AF_INET6)) is not None:
        return f"[{addr}]:{port}"
    if (addr := _resolve(hostname, port, socket.AF_INET)) is not None:
        return f"{addr}:{port}"
    raise _unresolvable(hostname)


def _resolve(hostname: str, port: int, family: socket.AddressFamily) -> str | None:
    try:
        infos = socket.getaddrinfo(hostname, port, family, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return None
    if not infos:
        return None
    addr = str(infos[0][4][0])
    return None if ipaddress.ip_address(addr).is_link_local else addr


def _unresolvable(hostname: str) -> RuntimeError:
    return RuntimeError(
        f"Unable to resolve `{hostname}` to ipv6 or ipv4 address that can bind TCP socket."
        " Check the network configuration on the host.")
