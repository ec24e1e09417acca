"""The debugger's command language, as a person types it at `monarch_dbg>`: parsed into values.

    attach | a <actor_name> <rank>        Attach(actor_name, rank)
    list | l,  help | h,  quit | q,  continue | c
    cast <actor_name> ranks(<spec>) <pdb command>
                                          Cast(actor_name, ranks, command)

`<spec>` is one rank (`3` -> 3), a list (`1,4,6` -> [1, 4, 6]), a range whose parts may each be
left out (`start:stop:step`; `:` is every rank, `range(0, sys.maxsize)`), or dimensions
(`dp=1:5:2, tp=3, pp=(3,6)` -> {"dp": range(1, 5, 2), "tp": 3, "pp": [3, 6]}). The same inputs
parse to the same values as Monarch's own debugger, and the same inputs are refused.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass
from typing import Any, Union

from .._geometry._selection import split_top

Ranks = Union[int, list, range, dict]
"""What a `cast` selects: a rank, ranks, a range, or per-dimension ones of those."""

NAME = r"[A-Za-z0-9_\-]+"
_INT = re.compile(r"\s*(\d+)\s*")
_RANGE = re.compile(r"\s*(\d*)\s*:\s*(\d*)\s*(?::\s*(\d*)\s*)?")
_ATTACH = re.compile(rf"(?:attach|a)\s+({NAME})\s+(\d+)")
_CAST = re.compile(rf"cast\s+({NAME})\s+ranks\((.*)")
_DIM = re.compile(rf"\s*({NAME})\s*=(.*)", re.S)


class DebugCommandError(ValueError):
    """A line that is not a debugger command; the text says what was wrong."""


@dataclass(frozen=True)
class Attach:
    actor_name: str
    rank: int


@dataclass(frozen=True)
class ListCommand:
    pass


@dataclass(frozen=True)
class Help:
    pass


@dataclass(frozen=True)
class Quit:
    pass


@dataclass(frozen=True)
class Continue:
    pass


@dataclass(frozen=True)
class Cast:
    actor_name: str
    ranks: Ranks
    command: str


DebugCommand = Union[Attach, ListCommand, Help, Quit, Continue, Cast]

_WORDS: dict[str, DebugCommand] = {
    "list": ListCommand(), "l": ListCommand(), "help": Help(), "h": Help(),
    "quit": Quit(), "q": Quit(), "continue": Continue(), "c": Continue(),
}


def parse_command(line: str) -> DebugCommand:
    """The command `line` spells; DebugCommandError if it spells none."""
    text = line.strip()
    if text in _WORDS:
        return _WORDS[text]
    attach = _ATTACH.fullmatch(text)
    if attach:
        return Attach(attach.group(1), int(attach.group(2)))
    cast = _CAST.fullmatch(text)
    if cast:
        spec, command = _close_paren(cast.group(2))
        return Cast(cast.group(1), parse_ranks(spec), command)
    raise DebugCommandError(f"not a command: {text!r} (help lists them)" if text
                            else "empty input (help lists the commands)")


def _close_paren(rest: str) -> tuple[str, str]:
    """Splits `<spec>) <command>` at the parenthesis that closes `ranks(`."""
    depth = 0
    for i, ch in enumerate(rest):
        depth += ch == "("
        if ch == ")":
            if depth == 0:
                command = rest[i + 1:]
                if not command[:1].isspace() or not command.strip():
                    raise DebugCommandError("cast needs a pdb command after ranks(...)")
                return rest[:i], command.strip()
            depth -= 1
    raise DebugCommandError("ranks( is never closed")


def parse_ranks(spec: str) -> Ranks:
    """The selection a `ranks(...)` spec spells (see the module docstring)."""
    if "=" in spec:
        dims: dict[str, Any] = {}
        for part in split_top(spec):
            dim = _DIM.fullmatch(part)
            if dim is None or dim.group(1) in dims:
                raise DebugCommandError(f"not a dimension selection: {part.strip()!r}")
            dims[dim.group(1)] = _dim_value(dim.group(2))
        return dims
    if "," in spec:
        return _int_list(spec)
    return _single(spec)


def _dim_value(text: str) -> int | list[int] | range:
    value = text.strip()
    if value.startswith("(") and value.endswith(")"):
        return _int_list(value[1:-1])
    return _single(value)


def _single(text: str) -> int | range:
    whole = _INT.fullmatch(text)
    if whole:
        return int(whole.group(1))
    bounds = _RANGE.fullmatch(text)
    if bounds is None:
        raise DebugCommandError(f"not a rank or a range: {text.strip()!r}")
    start, stop, step = (int(b) if b else None for b in bounds.groups())
    if step == 0:
        raise DebugCommandError("a range's step cannot be 0")
    return range(start or 0, sys.maxsize if stop is None else stop, step or 1)


def _int_list(text: str) -> list[int]:
    ranks = []
    for part in text.split(","):
        whole = _INT.fullmatch(part)
        if whole is None:
            raise DebugCommandError(f"not a list of ranks: {text.strip()!r}")
        ranks.append(int(whole.group(1)))
    return ranks


def selects(ranks: Ranks, rank: int, coords: dict[str, int]) -> bool:
    """Whether a session at `rank` (with `coords` per dimension) is in the selection."""
    if isinstance(ranks, dict):
        return all(dim in coords and _contains(value, coords[dim])
                   for dim, value in ranks.items())
    return _contains(ranks, rank)


def _contains(value: int | list | range, rank: int) -> bool:
    return rank == value if isinstance(value, int) else rank in value
