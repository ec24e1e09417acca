"""Identifiers and transports: ProcId, Uid, ChannelTransport (`monarch.config.enable_transport`
chooses one)."""

from __future__ import annotations

import enum
import secrets
from typing import Any


class ChannelTransport(enum.Enum):
    """How processes reach each other. Unix sockets on one host, TCP across hosts."""

    Unix = "unix"
    Local = "local"
    TcpWithLocalhost = "tcp_localhost"
    TcpWithHostname = "tcp_hostname"
    Tls = "tls"
    Quic = "quic"
    MetaTlsWithHostname = "metatls_hostname"
    MetaTlsWithIpV6 = "metatls_ipv6"
    MetaQuicWithHostname = "metaquic_hostname"
    MetaQuicWithIpV6 = "metaquic_ipv6"

    @staticmethod
    def get(name: str) -> "ChannelTransport":
        """The transport named `name` (its value or its member name)."""
        for member in ChannelTransport:
            if name in (member.value, member.name):
                return member
        raise ValueError(f"unknown transport {name!r}")


_SUPPORTED = {ChannelTransport.Unix, ChannelTransport.Local, ChannelTransport.TcpWithLocalhost,
              ChannelTransport.TcpWithHostname}


def transport_key(member: ChannelTransport) -> str:
    """What `default_transport` stores for a transport; ValueError for one not available."""
    if member not in _SUPPORTED:
        raise ValueError(f"transport {member.name} is not available in this runtime; use Unix "
                         "or TcpWithHostname")
    return "unix" if member is ChannelTransport.Local else member.value


class Uid:
    """A unique identifier with an optional label (`label<token>`)."""

    def __init__(self, label: str | None = None, token: str | None = None) -> None:
        self.label = label
        self.uid = token or secrets.token_hex(6)

    @staticmethod
    def anonymous() -> "Uid":
        """A fresh identifier without a label."""
        return Uid()

    @staticmethod
    def instance(label: str) -> "Uid":
        """A fresh identifier labelled `label`."""
        return Uid(label)

    @staticmethod
    def from_string(text: str) -> "Uid":
        """Parses `label<token>` or a bare token."""
        if text.endswith(">") and "<" in text:
            label, _, token = text[:-1].partition("<")
            return Uid(label or None, token)
        return Uid(None, text)

    def __str__(self) -> str:
        return f"{self.label}<{self.uid}>" if self.label else self.uid

    __repr__ = __str__

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, Uid) and (self.label, self.uid) == (other.label, other.uid)

    def __hash__(self) -> int:
        return hash((self.label, self.uid))


class ProcId:
    """The identifier of a proc: its proc mesh and rank (`<mesh>-<rank>`)."""

    def __init__(self, mesh: str, rank: int) -> None:
        self.mesh = mesh
        self.rank = rank

    @property
    def label(self) -> str:
        """The proc mesh the proc belongs to."""
        return self.mesh

    @property
    def uid(self) -> str:
        """The proc's id as a string."""
        return str(self)

    @staticmethod
    def from_string(text: str) -> "ProcId":
        """Parses `<mesh>-<rank>`."""
        mesh, _, rank = text.rpartition("-")
        if not mesh or not rank.isdigit():
            raise ValueError(f"not a proc id: {text!r}")
        return ProcId(mesh, int(rank))

    def __str__(self) -> str:
        return f"{self.mesh}-{self.rank}"

    __repr__ = __str__

    def __eq__(self, other: Any) -> bool:
        return isinstance(other, ProcId) and (self.mesh, self.rank) == (other.mesh, other.rank)

    def __hash__(self) -> int:
        return hash((self.mesh, self.rank))
