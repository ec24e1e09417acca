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


def test_a_job_spec_that_does_not_load_is_not_remembered(tmp_path) -> None:
    def apply(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "monarch.cli", "apply", *args],
                              capture_output=True, text=True, timeout=60, cwd=tmp_path,
                              env=dict(os.environ, MONARCH_RUN_DIR=str(tmp_path / "run")))

    bad = apply(str(tmp_path / "nonexistent.py"))
    assert bad.returncode == 1 and "nonexistent.py" in bad.stderr
    assert not (tmp_path / ".monarch").exists()  # nothing recorded, nothing left behind
    again = apply()  # the next plain apply does not repeat the typo
    assert again.returncode == 1 and "No spec found" in again.stderr, again.stderr
