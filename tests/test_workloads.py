"""The RL and fault-tolerant training examples, run end to end as a user runs them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from waiting import wait_gone

ROOT = Path(__file__).resolve().parent.parent


def run_example(name: str, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "examples" / name), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=ROOT,
                          env=dict(os.environ, PYTHONUNBUFFERED="1"))


@pytest.mark.timeout(300)
def test_rl_grpo_mean_reward_rises():
    out = run_example("rl_grpo.py")
    assert out.returncode == 0, out.stderr[-4000:]
    found = re.search(r"mean reward ([\d.]+) \(first 10 steps\) -> ([\d.]+) \(last 10 steps\), "
                      r"160 steps in [\d.]+ s on 2 generator replicas", out.stdout)
    assert found, out.stdout[-2000:]
    first, last = float(found.group(1)), float(found.group(2))
    assert last > first + 0.15, out.stdout
    assert out.stdout.count("mean reward") == 17  # every 10 steps, and the summary


@pytest.mark.timeout(400)
def test_ft_training_keeps_training_through_three_group_kills():
    pytest.importorskip("torchft")
    out = run_example("ft_training.py", timeout=360)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-4000:]
    text = out.stdout
    kills = re.findall(r"SIGKILL (group\d(?:_g\d+)?) \(pid (\d+)\) mid-step", text)
    assert len(kills) == 3, text
    for name, _ in kills:  # supervision reported each death
        assert re.search(rf"supervision: {name} failed \(.*Killed\(sig=9\)\)", text), name
    assert len(re.findall(r"_g\d+: rejoined the quorum at step \d+", text)) == 3, text
    assert len(re.findall(r"_g\d+: healed from a live peer at step \d+", text)) >= 3, text
    assert re.search(r"committed steps 1\.\.\d+ \(0 missing\), 3 group failures reported", text)
    loss = re.search(r"loss ([\d.]+) \(first 10 steps\) -> ([\d.]+) \(last 10 steps\)", text)
    assert loss and float(loss.group(2)) < float(loss.group(1)) / 10, text
    pids = [int(p) for p in re.search(r"group pids: \[([\d, ]+)\]", text).group(1).split(",")]
    assert len(pids) == 6
    wait_gone(*pids)
