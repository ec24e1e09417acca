"""The debugger's command language (`monarch._actors._debug_commands`): what parses, to what, and what
is refused. Monarch's own parser cases run against it too (the conformance suite's
test_debugger.py); these pin our additions: the error texts and `selects`."""

from __future__ import annotations

import sys

import pytest

from monarch._actors._debug_commands import (Attach, Cast, Continue, DebugCommandError, Help,
                                     ListCommand, Quit, parse_command, selects)


@pytest.mark.parametrize("line, command", [
    ("  attach trainer 3 ", Attach("trainer", 3)),
    ("a my-actor_2 0", Attach("my-actor_2", 0)),
    ("l", ListCommand()), ("help", Help()), ("q", Quit()), ("continue", Continue()),
    ("cast t ranks(4) p x", Cast("t", 4, "p x")),
    ("cast t ranks( 1 , 3 ) up 2", Cast("t", [1, 3], "up 2")),
    ("cast t ranks(2:) n", Cast("t", range(2, sys.maxsize), "n")),
    ("cast t ranks(::3) n", Cast("t", range(0, sys.maxsize, 3), "n")),
    ("cast t ranks(pp=2, dp=(1,3), tp=2:8) bt", Cast("t", {"pp": 2, "dp": [1, 3],
                                                          "tp": range(2, 8)}, "bt")),
    ("cast t ranks(0) p f(1)", Cast("t", 0, "p f(1)")),  # the command keeps its parentheses
])
def test_a_command_parses_to_its_value(line, command):
    assert parse_command(line) == command


@pytest.mark.parametrize("line, says", [
    ("", "empty input"),
    ("bogus", "not a command: 'bogus'"),
    ("attach t", "not a command"),
    ("cast t ranks(1,2", "never closed"),
    ("cast t ranks(1))", "needs a pdb command"),
    ("cast t ranks(1)", "needs a pdb command"),
    ("cast t ranks(1::0) p", "step cannot be 0"),
    ("cast t ranks(1,x) p", "not a list of ranks: '1,x'"),
    ("cast t ranks(a=1, a=2) p", "not a dimension selection: 'a=2'"),
    ("cast t ranks(a=1,) p", "not a dimension selection: ''"),
])
def test_a_bad_line_is_refused_with_what_was_wrong(line, says):
    with pytest.raises(DebugCommandError, match=says.replace("(", r"\(").replace(")", r"\)")):
        parse_command(line)


def test_selects_by_rank_list_range_and_dimension():
    coords = {"dp": 1, "tp": 5}
    assert selects(3, 3, {}) and not selects(3, 4, {})
    assert selects([1, 3], 3, {}) and not selects([1, 3], 2, {})
    assert selects(range(0, sys.maxsize, 2), 10, {}) and not selects(range(1, 4), 4, {})
    assert selects({"dp": [0, 1], "tp": range(4, 8)}, 99, coords)
    assert not selects({"dp": 0}, 99, coords)
    assert not selects({"pp": 0}, 99, coords)  # a dimension the session does not have
