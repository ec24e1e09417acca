"""Ctrl-C in a loop of calls never breaks the job: a script that catches KeyboardInterrupt
(a notebook user interrupting a cell, then running the next) keeps calling its meshes.

Before, an interrupt landing between a socket write and its bookkeeping corrupted the stream
to a proc, one between numbering a call and sending it left a gap, one between a lock's
acquire and its `try` held the lock for good: every later call to those actors hung (a loop
that caught ~300 interrupts hung within seconds, every time). The main thread now holds its
KeyboardInterrupt back while it changes the message plane's state (`_wire/_signals.py`), and
one that a finalizer swallowed is sent again."""

from __future__ import annotations

import queue
import random
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(300)

LOOP = Path(__file__).with_name("interrupted_loop.py")
INTERRUPTS = 200


def test_a_script_that_catches_ctrl_c_keeps_calling_its_meshes(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, str(LOOP)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=tmp_path)
    try:
        while "ready" not in (line := proc.stdout.readline()):  # type: ignore[union-attr]
            assert line, proc.stderr.read()[-3000:]  # type: ignore[union-attr]
        acks: queue.Queue[str] = queue.Queue()
        others: list[str] = []

        def read() -> None:
            for out in proc.stdout:  # type: ignore[union-attr]
                found = re.search(r"(caught|ok) \d+", out)
                if found is None:
                    continue
                (acks.put if found[1] == "caught" else others.append)(found[0])

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        errs: list[str] = []
        threading.Thread(target=lambda: errs.extend(proc.stderr), daemon=True).start()
        rng = random.Random(0)
        seen = 0
        for k in range(INTERRUPTS):
            time.sleep(rng.uniform(0.002, 0.015))  # sleep-ok: the interrupt's random point
            proc.send_signal(signal.SIGINT)
            while seen <= k:  # the script counts every KeyboardInterrupt it caught
                try:
                    seen = int(acks.get(timeout=15).split()[1])
                except queue.Empty:
                    pytest.fail(f"interrupt {k + 1} never reached the script (lost, or it "
                                f"hung): {seen} caught")
            assert seen == k + 1, f"{k + 1} interrupts sent, {seen} caught"
        proc.stdin.write("stop\n")  # type: ignore[union-attr]
        proc.stdin.flush()  # type: ignore[union-attr]
        proc.wait(timeout=120)
        reader.join(10)
        assert others == [f"ok {INTERRUPTS}"], (others, "".join(errs)[-3000:])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
