"""A real job for the console's tests: the demo workload as a subprocess controller, reached
through its admin API exactly as `monarch top` reaches a job."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from waiting import wait_until

from monarch.admin import AdminClient


class DemoJob:
    """`python -m monarch.console._demo` with its own run directory and control directory."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None) -> None:
        # ipc socket paths must stay short (108 bytes): the run directory is not under root
        self.run_dir = Path(tempfile.mkdtemp(prefix="ct-"))
        self.control = root / "control"
        self.control.mkdir(exist_ok=True)
        self.log = root / "workload.log"
        self.env = dict(os.environ, MONARCH_RUN_DIR=str(self.run_dir), **(env or {}))
        command = [sys.executable, "-m", "monarch.console._demo", "--control",
                   str(self.control), "--interval", "0.3", *args]
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, env=self.env,
                                         start_new_session=True)
        self.info = self._wait_for_admin()
        self.client = AdminClient(self.info["address"], self.info["token"], self.info)

    def _wait_for_admin(self, timeout: float = 60.0) -> dict[str, Any]:
        def written() -> dict[str, Any] | None:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the demo exited: {self.output()[-3000:]}")
            for path in self.run_dir.glob("*/admin.json"):
                try:
                    return json.loads(path.read_text())
                except ValueError:
                    pass  # being written
            return None

        return wait_until(written, lambda: f"admin.json in {self.run_dir}: "
                          f"{self.output()[-3000:]}", timeout)

    def wait_until(self, predicate: Any, timeout: float = 30.0, what: str = "") -> Any:
        """Polls `predicate()` (every 50 ms) until it returns something truthy."""
        return wait_until(predicate, what, timeout)

    def wait_ready(self, meshes: tuple[str, ...] = ("trainers", "generators", "rewards",
                                                      "inspector")) -> None:
        """Until every actor of `meshes` runs and has handled a message."""
        def ready() -> bool:
            topo = self.client.topology()
            found = {m["name"]: m for m in topo["meshes"]}
            return all(name in found and found[name]["actors"] and all(
                a["state"] == "running" and a["messages"] > 0 for a in found[name]["actors"])
                for name in meshes)

        self.wait_until(ready, 60.0, "the demo's actors to run")

    def mesh(self, name: str) -> dict[str, Any]:
        return next(m for m in self.client.topology()["meshes"] if m["name"] == name)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def touch(self, what: str) -> None:
        (self.control / what).touch()

    def stop(self) -> None:
        try:
            self._stop()
        finally:
            shutil.rmtree(self.run_dir, ignore_errors=True)

    def _stop(self) -> None:
        if self.proc.poll() is None:
            self.touch("stop")
            try:
                self.proc.wait(timeout=15)
                return
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
