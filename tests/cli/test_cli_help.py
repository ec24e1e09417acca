"""Help pages read well at any width: docstrings are reflowed, not printed line for line."""

from __future__ import annotations

import os
import subprocess
import sys

from monarch.cli._app import reflow


def test_reflow_joins_paragraph_lines_and_keeps_lists_and_code() -> None:
    doc = """First line of the summary
    goes on here.

    A second paragraph, hard
    wrapped at some width.

    - a list item
    - another
        an indented block
    """
    assert reflow(doc) == ("First line of the summary goes on here.\n\n"
                           "A second paragraph, hard wrapped at some width.\n\n"
                           "- a list item\n- another\n    an indented block")


def test_demo_help_at_80_columns_wraps_at_the_terminal_not_at_the_source() -> None:
    out = subprocess.run([sys.executable, "-m", "monarch.cli", "demo", "--help"],
                         capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, COLUMNS="80", NO_COLOR="1"))
    assert out.returncode == 0
    text = " ".join(out.stdout.split())
    # the docstring's source lines broke after "controller" and "when the": one sentence now
    assert "runs as its own controller process; the console attaches to it" in text
    lines = [line.strip() for line in out.stdout.splitlines()]
    assert "controller" not in lines and "stops when the" not in lines
