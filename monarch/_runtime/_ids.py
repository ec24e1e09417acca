"""Identifiers: ProcId, Uid (transports are `monarch.config.ChannelTransport`)."""

from __future__ import annotations

import secrets
from typing import Any


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
