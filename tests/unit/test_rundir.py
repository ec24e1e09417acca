"""Run directories: a sweep removes those of dead controllers and keeps the rest, even while
other processes create and remove theirs."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from monarch._runtime import _rundir
from monarch._runtime._rundir import OWNER, STALE_WITHOUT_OWNER_S, claim, sweep_dead

pytestmark = pytest.mark.timeout(60)


def test_a_sweep_removes_dead_controllers_directories_only(tmp_path):
    live, dead, fresh, stale = (tmp_path / name for name in ("live", "dead", "fresh", "stale"))
    for run_dir in (live, dead, fresh, stale, tmp_path / "history"):
        run_dir.mkdir()
    claim(live)
    (dead / OWNER).write_text("999999999 12345")  # no such process
    old = time.time() - STALE_WITHOUT_OWNER_S - 60
    os.utime(stale, (old, old))  # never claimed, long ago: debris
    assert sorted(p.name for p in sweep_dead(tmp_path)) == ["dead", "stale"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "history", "live"]


def test_a_directory_removed_while_it_is_swept_is_skipped(tmp_path, monkeypatch):
    # Its owner's `release` unlinks the owner file, then the directory: a sweep that finds
    # the file gone may then find the directory gone too (a worker died of this at start).
    vanishing, live = tmp_path / "vanishing", tmp_path / "live"
    vanishing.mkdir()
    live.mkdir()
    claim(live)
    read_text = Path.read_text

    def racing_read_text(self: Path, *args, **kwargs):
        if self == vanishing / OWNER:
            shutil.rmtree(vanishing)
        return read_text(self, *args, **kwargs)

    monkeypatch.setattr(_rundir.Path, "read_text", racing_read_text)
    assert sweep_dead(tmp_path) == []
    assert [p.name for p in tmp_path.iterdir()] == [live.name]
