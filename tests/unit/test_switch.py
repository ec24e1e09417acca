"""On/off switches read one way wherever they come from (an environment variable, a request's
parameter): 1/true/on/yes and 0/false/off/no in any case, empty for the default, anything else
refused naming the switch."""

from __future__ import annotations

import pytest

from monarch._controller._admin_actions import BadRequest
from monarch._controller._admin_api import Params
from monarch._wire._switch import on_off, switch

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("text, on", [("1", True), ("TRUE", True), (" on ", True),
                                      ("Yes", True), ("0", False), ("false", False),
                                      ("OFF", False), ("no", False)])
def test_the_spellings_of_on_and_off(text, on):
    assert on_off("X", text, default=not on) is on


def test_empty_is_the_default_and_anything_else_is_refused():
    assert on_off("X", "", True) is True and on_off("X", "  ", False) is False
    with pytest.raises(ValueError, match="X='maybe': expected one of 1/true/on/yes"):
        on_off("X", "maybe", True)


def test_an_environment_switch(monkeypatch):
    monkeypatch.delenv("MONARCH_TEST_SWITCH", raising=False)
    assert switch("MONARCH_TEST_SWITCH", default=False) is False
    monkeypatch.setenv("MONARCH_TEST_SWITCH", "Off")
    assert switch("MONARCH_TEST_SWITCH") is False
    monkeypatch.setenv("MONARCH_TEST_SWITCH", "2")
    with pytest.raises(ValueError, match="MONARCH_TEST_SWITCH='2'"):
        switch("MONARCH_TEST_SWITCH")


def test_an_admin_api_flag_reads_the_same_and_refuses_a_typo():
    assert Params({}).flag("by_process") is False
    assert Params({"by_process": True}).flag("by_process") is True  # a JSON body's bool
    assert Params({"by_process": "1"}).flag("by_process") is True  # the client's query
    assert Params({"by_process": "no"}).flag("by_process") is False
    with pytest.raises(BadRequest, match="parameter by_process='ture'"):
        Params({"by_process": "ture"}).flag("by_process")
