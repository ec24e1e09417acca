"""`monarch top` at a job's size (issue 32, item 1): refreshes per second, key latency and what
the console's polling costs the controller, on a job of 64, 256 and 1,024 busy actors.

    python bench/console_scale.py                       # 64, 256 and 1,024 actors
    python bench/console_scale.py --actors 1024 --seconds 20 --json out.json
    python bench/console_scale.py --actors 1024 --hosts 16   # over a ProcessJob of 16 hosts

For each size, a job runs as a child process (its own controller): `procs` procs on this host,
`meshes` meshes of one `Worker` per proc (64 = 16 procs x 4 meshes, 256 = 64 x 4, 1,024 =
64 x 16), calling every mesh in a loop (one `call` to each, all answers got, again). This side
reaches it through its admin API as `monarch top` does, and:

1. reads the controller's CPU (`/proc/<pid>/stat`) over `--seconds` with no console: the job's
   own cost;
2. runs the console (`MonarchTop`, `--refresh` its default, headless under Pilot, 200 x 50)
   for as long, pressing `j`/`k` once a second (`simulate_key`: queued to the app as a
   terminal's key is; the cursor moves through the tree) and reading the controller's CPU
   again, then once more without the console: the difference from the mean of the two
   windows without it is what the console's polling costs it (the job's own cost drifts:
   its first seconds, its growing history);
3. prints one JSON line per size: topology refreshes shown per second (target >= 2), key
   latency (from the key queued until the cursor moved: p50 and max, ms; target p50 <= 100,
   max <= 300), the controller's CPU in % of one core with and without the console, the
   console process's own CPU, and the topology's size on the wire, whole and changed-since
   one poll (kB).

The difference of the windows is what the console costs the controller in all (its requests,
and the collections and thread switches they cause), but the job's own cost moves by a few %
of a core from window to window (its full collections take ~200 ms each at 1,024 actors).
`console_cost_controller_direct_pct` is the part the admin API counted itself (`/v1/stats`:
the CPU time of the threads that served the console's requests, and of their reads on the
controller's I/O thread), without that noise.

Figures, never assertions: the machine is shared and noisy. Each job is stopped at the end of
its size (nothing is left running).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SHAPES = {64: (16, 4), 256: (64, 4), 1024: (64, 16)}
"""Actors -> (procs, meshes)."""


# -- the job (a child process: `--job PROCS MESHES HOSTS`) ----------------------------------------

def run_job(procs_n: int, meshes_n: int, hosts_n: int = 0) -> None:
    """The busy job: `procs_n` procs on this host, or (`hosts_n` > 0) a `ProcessJob` of
    `hosts_n` host processes with `procs_n // hosts_n` procs each, as issue 32's second shape."""
    from monarch.actor import Actor, endpoint, this_host

    class Worker(Actor):
        def __init__(self) -> None:
            self.steps = 0

        @endpoint
        def step(self) -> int:
            self.steps += 1
            return self.steps

    job = None
    if hosts_n:
        from monarch.job import ProcessJob

        # its host processes run in sessions of their own: a SIGTERM must unwind to kill()
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        job = ProcessJob({"hosts": hosts_n})
        procs = job.state(cached_path=None).hosts.spawn_procs(
            per_host={"gpus": procs_n // hosts_n})
    else:
        procs = this_host().spawn_procs(per_host={"gpus": procs_n})
    meshes = [procs.spawn(f"w{i:02d}", Worker) for i in range(meshes_n)]
    parent = os.getppid()
    rounds = 0
    try:
        while os.getppid() == parent:
            for future in [mesh.step.call() for mesh in meshes]:
                future.get(timeout=120)
            rounds += 1
            if rounds == 1:
                print("READY", flush=True)
    finally:
        try:
            procs.stop().get(timeout=60)
        finally:
            if job is not None:
                job.kill()


# -- this side ------------------------------------------------------------------------------------

def cpu_s(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cpu_pct(pid: int, seconds: float) -> float:
    before, start = cpu_s(pid), time.monotonic()
    time.sleep(seconds)
    return 100 * (cpu_s(pid) - before) / (time.monotonic() - start)


class Job:
    """The job child, with its own run directory; `client` reaches its admin API."""

    def __init__(self, actors: int, hosts: int = 0) -> None:
        procs, meshes = SHAPES[actors]
        self.run_dir = Path(tempfile.mkdtemp(prefix="cs-"))
        env = dict(os.environ, MONARCH_RUN_DIR=str(self.run_dir))
        self.proc = subprocess.Popen([sys.executable, __file__, "--job", str(procs), str(meshes),
                                      str(hosts)],
                                     stdout=subprocess.PIPE, stderr=sys.stderr, text=True, env=env,
                                     start_new_session=True)

    def wait_ready(self, timeout: float = 180.0) -> None:
        from monarch.admin import wait_for_job

        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if line.strip() != "READY":
            raise RuntimeError(f"the job did not start (exit {self.proc.poll()})")
        os.environ["MONARCH_RUN_DIR"] = str(self.run_dir)  # where wait_for_job looks
        self.client = wait_for_job(timeout=timeout)

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                os.killpg(self.proc.pid, signal.SIGTERM)
                try:
                    self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                    self.proc.wait()
        finally:
            try:
                self.kill_allocations()
            finally:
                shutil.rmtree(self.run_dir, ignore_errors=True)

    def kill_allocations(self) -> None:
        """Ends the `ProcessJob` allocations the job left (their host processes run in sessions
        of their own and outlive a job killed before its `kill()`: 16 hosts and their zygotes
        were found running half an hour after a run)."""
        from monarch._jobs._allocation import load_job

        allocations = self.run_dir / "allocations"
        if not allocations.is_dir():
            return
        os.environ["MONARCH_RUN_DIR"] = str(self.run_dir)  # where load_job looks
        for found in allocations.iterdir():
            if not (found / "job.pkl").is_file():
                continue
            try:
                load_job(found.name).kill()
            except Exception as exc:  # noqa: BLE001 - said; the next one may still end
                print(f"console_scale: allocation {found.name}: {type(exc).__name__}: {exc}",
                      file=sys.stderr)


async def measure_console(client: Any, pid: int, seconds: float,
                          refresh: float) -> dict[str, Any]:
    from monarch.console.app import MonarchTop

    import gc

    from monarch.console.app import quiet_gc

    quiet_gc()  # as `monarch top` does
    app = MonarchTop(client, refresh=refresh)
    moved: list[float] = []
    pauses: list[float] = []  # the console's garbage collections (a suspect for key spikes)
    started_gc: list[float] = []

    def on_gc(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started_gc[:] = [time.perf_counter()]
        elif started_gc and info.get("generation") == 2:
            pauses.append((time.perf_counter() - started_gc[0]) * 1000)

    gc.callbacks.append(on_gc)
    async with app.run_test(size=(200, 50)) as pilot:
        deadline = time.monotonic() + 120
        while len(app.mesh_tree.rows_shown) < 4 and time.monotonic() < deadline:
            await pilot.pause(0.1)
        await pilot.press("g")
        routes0 = admin_routes(client)
        cpu0, mine0, start = cpu_s(pid), time.process_time(), time.monotonic()
        step = 0
        while time.monotonic() - start < seconds:
            row = app.mesh_tree.cursor_row
            key = "down" if (step // 5) % 2 == 0 else "up"
            before = time.perf_counter()
            app.simulate_key(key)  # as a terminal's key arrives: queued to the app
            while app.mesh_tree.cursor_row == row and time.perf_counter() - before < 10:
                await asyncio.sleep(0.001)
            moved.append((time.perf_counter() - before) * 1000)
            step += 1
            await asyncio.sleep(max(0.0, 1.0 - (time.perf_counter() - before)))
        elapsed = time.monotonic() - start
        ctl = 100 * (cpu_s(pid) - cpu0) / elapsed
        routes1 = admin_routes(client)
        direct = 100 * sum(r["cpu_s"] + r["io_s"] - routes0.get(k, {}).get("cpu_s", 0.0)
                           - routes0.get(k, {}).get("io_s", 0.0)
                           for k, r in routes1.items()) / elapsed
        mine = 100 * (time.process_time() - mine0) / elapsed
        stats = app.statistics(window_s=elapsed)
        rows = len(app.mesh_tree.rows_shown)
    gc.callbacks.remove(on_gc)
    return {"refreshes_per_s": round(stats.snapshots_per_s, 2),
            "cursor_moved_ms_p50": round(statistics.median(moved), 1),
            "cursor_moved_ms_max": round(max(moved), 1),
            "controller_cpu_pct_with_console": round(ctl, 1),
            "console_cost_controller_direct_pct": round(direct, 2),
            "console_request_ms": per_request_ms(routes0, routes1),
            "console_cpu_pct": round(mine, 1), "tree_rows": rows, "presses": len(moved),
            "console_full_gcs": len(pauses),
            "console_full_gc_max_ms": round(max(pauses), 1) if pauses else 0.0}


def admin_routes(client: Any) -> dict[str, dict[str, float]]:
    """The admin API's counts by route (`/v1/stats`), this bench's stats requests left out."""
    routes = client.stats()["admin"]["routes"]
    return {route: r for route, r in routes.items() if route != "GET /v1/stats"}


def per_request_ms(before: dict[str, dict[str, float]],
                   after: dict[str, dict[str, float]]) -> dict[str, float]:
    """Controller CPU ms per request by route, between two `admin_routes`: [on the serving
    thread, on the I/O thread, requests]."""
    out = {}
    for route, now in after.items():
        was = before.get(route, {"requests": 0, "cpu_s": 0.0, "io_s": 0.0})
        n = now["requests"] - was["requests"]
        if n:
            out[route] = [round(1000 * (now["cpu_s"] - was["cpu_s"]) / n, 2),
                          round(1000 * (now["io_s"] - was["io_s"]) / n, 2), n]
    return out


def topology_sizes(client: Any, refresh: float) -> dict[str, Any]:
    """The topology's bytes on the wire: whole, what changed over one poll's interval, and
    the same with every mesh folded (what the console gets each poll of a job whose meshes
    it shows closed: `AdminClient.topology(since=..., rows=...)`)."""
    sizes = {}
    for name, query in (("", ""), ("_folded", "fold=1&")):
        whole = client._request("GET", f"/v1/topology?{query}")[1]
        time.sleep(refresh)
        version = json.loads(whole)["version"]
        since = client._request("GET", f"/v1/topology?{query}since={version}")[1]
        sizes[f"topology_kb_whole{name}"] = round(len(whole) / 1024, 1)
        sizes[f"topology_kb_since{name}"] = round(len(since) / 1024, 1)
    return sizes


def measure(actors: int, seconds: float, refresh: float,
            profile: Path | None = None, hosts: int = 0) -> dict[str, Any]:
    job = Job(actors, hosts)
    try:
        job.wait_ready()
        row: dict[str, Any] = {"actors": actors}
        before = cpu_pct(job.proc.pid, seconds)
        spy = None
        if profile is not None:  # where the controller spends the console's window
            spy = subprocess.Popen([shutil.which("py-spy") or str(Path(sys.executable).with_name(
                "py-spy")), "record", "-p", str(job.proc.pid), "-d",
                                    str(int(seconds) + 5), "-r", "100", "-f", "raw", "-o",
                                    f"{profile}.{actors}.txt", "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        row.update(asyncio.run(measure_console(job.client, job.proc.pid, seconds, refresh)))
        if spy is not None:
            spy.wait(timeout=60)
        # the job's own cost drifts (its first seconds, its history growing): the windows
        # without the console come before and after the one with it, and count as their mean
        after = cpu_pct(job.proc.pid, seconds)
        row["controller_cpu_pct_without_console"] = round((before + after) / 2, 1)
        row["controller_cpu_pct_without_before_after"] = [round(before, 1), round(after, 1)]
        row.update(topology_sizes(job.client, refresh))
        row["console_cost_controller_pct"] = round(
            row["controller_cpu_pct_with_console"] - row["controller_cpu_pct_without_console"], 1)
        return row
    finally:
        job.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actors", default="64,256,1024",
                        help=f"sizes, comma-separated, of {sorted(SHAPES)}")
    parser.add_argument("--seconds", type=float, default=20.0, help="each window's length")
    from monarch.console import REFRESH_S

    parser.add_argument("--refresh", type=float, default=REFRESH_S,
                        help=f"the console's poll (s; its default {REFRESH_S})")
    parser.add_argument("--json", type=Path, help="also write the rows to this file")
    parser.add_argument("--profile", type=Path, help="py-spy the controller during the console's "
                        "window: collapsed stacks in PROFILE.<actors>.txt")
    parser.add_argument("--hosts", type=int, default=0,
                        help="run each job over a ProcessJob of this many host processes")
    parser.add_argument("--job", nargs=3, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.job:
        run_job(*args.job)
        return
    sizes = [int(s) for s in args.actors.split(",")]
    unknown = [s for s in sizes if s not in SHAPES]
    if unknown:
        parser.error(f"--actors: {unknown} not among {sorted(SHAPES)}")
    rows = []
    for actors in sizes:
        row = measure(actors, args.seconds, args.refresh, args.profile, args.hosts)
        if args.hosts:
            row["hosts"] = args.hosts
        print(json.dumps(row), flush=True)
        rows.append(row)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
