"""Faults between hosts: a host in a network namespace of its own, behind an emulated link
(`tests/netlink.py`: TUN devices and a forwarder, the kernel here has no netem). Delay and
loss keep the job correct and slower; a cut shorter than the heartbeat window loses and
duplicates nothing; a longer one is a host failure reported to its owner, and the host's procs
end themselves."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from netlink import available

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(available() is not None, reason=str(available()))]

JOB = Path(__file__).with_name("netfault_job.py")


def test_delay_loss_and_cuts_between_hosts(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, str(JOB)], capture_output=True, text=True,
                         timeout=280, cwd=tmp_path,
                         env=dict(os.environ, MONARCH_RUN_DIR=str(tmp_path / "run")))
    assert out.returncode == 0, out.stderr[-3000:]
    (line,) = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    seen = json.loads(line)
    # 50 ms each way and 5 % loss: every answer right, only slower
    assert seen["clean_ok"] and seen["degraded_ok"], seen
    assert seen["dropped_packets"] > 0 and seen["degraded_s"] > seen["clean_s"] + 1.0, seen
    # a short cut with 40 calls in flight: all answered, each handled once, in order
    assert seen["short_cut_answers_ok"] and seen["seen_exactly_once_in_order"], seen
    assert seen["failures_after_short_cut"] == [], seen
    # a long one: the owner hears the host is lost, and nothing of the job stays there
    assert seen["long_cut_reported"], seen
    assert "was lost: no heartbeat" in seen["long_cut_reason"], seen
    assert seen["proc_ended_itself"], seen
