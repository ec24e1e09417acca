"""A signal's exception (KeyboardInterrupt, a SIGTERM handler's SystemExit) that lands in a
thread waiting on a future never loses the loop's baton, wherever it lands: right after the
wait took the baton (before the thread led with it), or as the thread starts to lead. The
next call still answers, and the interrupted wait returns at once.

A CI run met the first: a script's SIGTERM handler fired just as `get` returned the baton;
giving up then waited for a baton it had already taken, and the script hung."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

JOB = Path(__file__).with_name("leader_signals_job.py")


@pytest.mark.parametrize("where", ["after_baton", "starting_to_lead"])
def test_a_signal_in_a_wait_never_loses_the_baton(where: str, tmp_path: Path) -> None:
    """`after_baton`: right after the wait's `get` took the baton; `starting_to_lead`: as the
    thread starts to lead with it (taken parked, or from its queue)."""
    out = subprocess.run([sys.executable, str(JOB), where], capture_output=True, text=True,
                         timeout=240, cwd=tmp_path)
    assert out.returncode == 0, (out.stdout[-2000:], out.stderr[-3000:])
    fired = [line for line in out.stdout.splitlines() if line.startswith("fired")]
    assert fired and int(fired[-1].split()[1]) >= 3, (out.stdout[-2000:], out.stderr[-3000:])
