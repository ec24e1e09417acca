"""Soak: the RL and fault-tolerant training workloads together under random faults, watched
from outside (MISSION §10; `bench/soak_job.py` is the job).

    python bench/soak.py                 # short mode: 2 minutes, a fault every 6-12 s (CI)
    python bench/soak.py --minutes 30    # long mode: a fault every 20-40 s
    python bench/soak.py --json out.json # also write the report

The job runs as a child (its own controller, its own run directory and history). This side:

- samples, every `--sample` seconds, the RSS, open descriptors and threads of the controller,
  of the host workers (the ProcessJob's) and of a proc no fault touches;
- checks, at the end: the job exited 0 and no call passed its deadline (a hang); training and
  routing went on under the faults; **nothing lost**: for every counter actor, the numbered
  lines and spans in the job's Parquet history (read post-mortem, as `monarch query --job`
  does) run from 1 with no gap and no duplicate, up to at least the last number it answered;
  **flat**: the controller's RSS stays under its first sample plus twice its telemetry budget
  and `SHORT_HEADROOM_MB`, and in a run of 30 minutes or more its floor (the lowest RSS of
  each sample's interval, read every `FLOOR_S`) grows by at most `--slope` MiB per 10 minutes
  after the warm-up (least squares), descriptors and threads do not grow;
  **nothing left**: no process of the job (every one carries its run directory in its
  environment) outlives it.

Prints the series and the checks; exits 1 when a check fails.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
JOB = ROOT / "bench" / "soak_job.py"
SHORT_HEADROOM_MB = 150.0
"""What the controller may add to its first sample besides twice its telemetry budget: torch,
pyarrow and the warm-up of a run (any run, short ones included)."""


def proc_stat(pid: int) -> dict[str, float] | None:
    """RSS (MiB), open descriptors and threads of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            status = dict(line.split(":", 1) for line in f if ":" in line)
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    if "VmRSS" not in status:  # a zombie: gone but not yet reaped
        return None
    return {"rss_mb": int(status["VmRSS"].split()[0]) / 1024, "fds": fds,
            "threads": int(status["Threads"])}


def ours(run_dir: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process whose environment names `run_dir`."""
    marker = f"MONARCH_RUN_DIR={run_dir}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                if marker not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            with open(f"/proc/{entry}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    continue
        except OSError:
            continue
        found.append((int(entry), cmd))
    return found


FLOOR_S = 5.0
"""Between samples the controller's RSS is also read every this often; each sample carries
the lowest of them (`rss_floor_mb`): what it kept through the interval's transient peaks (a
history pass, a burst of messages in flight), the figure a slow growth shows in."""


class Watch:
    """Samples the job's processes on a thread of its own."""

    def __init__(self, run_dir: str, every: float) -> None:
        self.run_dir, self.every = run_dir, every
        self._floor: float | None = None
        self.controller: int | None = None
        self.survivor: int | None = None
        self.samples: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._started = time.monotonic()

    def start(self) -> Watch:
        threading.Thread(target=self._run, daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        due = time.monotonic() + self.every
        while not self._stop.wait(min(FLOOR_S, max(due - time.monotonic(), 0.0))):
            stat = proc_stat(self.controller) if self.controller else None
            if stat:
                self._floor = min(self._floor or stat["rss_mb"], stat["rss_mb"])
            if time.monotonic() < due:
                continue
            due += self.every
            try:
                self._sample()
            except Exception as exc:  # noqa: BLE001 - a sample lost, never the whole series
                print(f"soak: a sample failed: {type(exc).__name__}: {exc}", flush=True)

    def _sample(self) -> None:
        sample: dict[str, Any] = {"t": round(time.monotonic() - self._started, 1)}
        for name, pid in (("controller", self.controller), ("survivor", self.survivor)):
            stat = proc_stat(pid) if pid else None
            if stat:
                sample[name] = stat
        if "controller" in sample:
            ctl = sample["controller"]
            ctl["rss_floor_mb"] = min(self._floor or ctl["rss_mb"], ctl["rss_mb"])
            self._floor = None
        workers = {pid: proc_stat(pid) for pid, cmd in ours(self.run_dir)
                   if "monarch._host.worker" in cmd}
        sample["workers"] = {str(pid): s for pid, s in workers.items() if s}
        self.samples.append(sample)


def floor_mb(sample: dict[str, Any]) -> float:
    """The controller's RSS floor of a sample (its RSS in a report written before floors)."""
    ctl = sample["controller"]
    return float(ctl.get("rss_floor_mb", ctl["rss_mb"]))


def slope_per_10min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, MiB), in MiB per 10 minutes."""
    n = len(points)
    if n < 3:
        return 0.0
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    return 600 * sum((t - mt) * (v - mv) for t, v in points) / den if den else 0.0


def history_counts(run_dir: str, job_id: str) -> dict[str, dict[str, dict[str, int]]]:
    """Per counter token, for lines and spans: rows, distinct numbers, lowest and highest,
    read from the job's Parquet history."""
    os.environ["MONARCH_RUN_DIR"] = run_dir
    from monarch._history._runs import open_history

    history = open_history(job_id)
    out: dict[str, dict[str, dict[str, int]]] = {}
    for kind, table, column, prefix in (("lines", "logs", "text", "soak-line"),
                                        ("spans", "spans", "name", "soak-span")):
        result = history.query(
            f"SELECT split_part({column}, ' ', 2) AS token, count(*) AS rows, "
            f"count(DISTINCT split_part({column}, ' ', 3)) AS distinct_n, "
            f"min(CAST(split_part({column}, ' ', 3) AS BIGINT)) AS lo, "
            f"max(CAST(split_part({column}, ' ', 3) AS BIGINT)) AS hi "
            f"FROM {table} WHERE {column} LIKE '{prefix} %' GROUP BY 1")
        for row in result.to_pylist():
            out.setdefault(row["token"], {})[kind] = {k: int(row[k]) for k in
                                                      ("rows", "distinct_n", "lo", "hi")}
    return out


def check(summary: dict[str, Any], counts: dict[str, Any], samples: list[dict[str, Any]],
          left: list[tuple[int, str]], args: argparse.Namespace, rc: int) -> list[str]:
    """The failed checks (empty: all passed)."""
    bad = []
    c = summary.get("counts", {})
    if rc != 0:
        bad.append(f"the job exited {rc}")
    if summary.get("errors"):
        bad.append(f"workload errors: {summary['errors']}")
    if c.get("hangs"):
        bad.append(f"{c['hangs']} calls passed their {args.deadline:g} s deadline")
    for key in ("rl_steps", "ft_steps", "counter_calls"):
        if not c.get(key):
            bad.append(f"no progress: {key} = {c.get(key)}")
    for token, acked in summary.get("acked", {}).items():
        for kind in ("lines", "spans"):
            got = counts.get(token, {}).get(kind)
            if (got is None or got["lo"] != 1 or got["rows"] != got["distinct_n"]
                    or got["hi"] - got["lo"] + 1 != got["rows"] or not
                    acked <= got["hi"] <= acked + 1):
                bad.append(f"{kind} of counter {token}: answered up to {acked}, history {got}")
    warm = [s for s in samples if s["t"] >= args.warmup and "controller" in s]
    if len(warm) >= 3:
        if args.slope is not None:  # a long run: flat once warm
            rss = slope_per_10min([(s["t"], floor_mb(s)) for s in warm])
            if rss > args.slope:
                bad.append(f"controller RSS (its floor over each sample's interval) grows "
                           f"{rss:.1f} MiB per 10 min (bound {args.slope:g})")
        first = next(s["controller"]["rss_mb"] for s in samples if "controller" in s)
        ceiling = first + 2 * args.budget_mb + SHORT_HEADROOM_MB
        highest = max(s["controller"]["rss_mb"] for s in warm)
        if highest > ceiling:  # any run: within the telemetry budget and a headroom
            bad.append(f"controller RSS reached {highest:.0f} MiB (first sample {first:.0f}, "
                       f"bound {ceiling:.0f})")
        for key, bound in (("fds", 16), ("threads", 8)):
            first, last = warm[0]["controller"][key], warm[-1]["controller"][key]
            if last - first > bound:
                bad.append(f"controller {key} {first} -> {last}")
    else:
        bad.append(f"only {len(warm)} samples after the warm-up")
    if left:
        bad.append(f"left running: {left}")
    return bad


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--every", type=float, nargs=2, default=None,
                        help="seconds between faults, drawn in [a, b] (default: 6 12 for "
                             "runs under 10 minutes, else 20 40)")
    parser.add_argument("--sample", type=float, default=None,
                        help="seconds between samples (default: 10, or 60 from 10 minutes)")
    parser.add_argument("--warmup", type=float, default=None,
                        help="seconds before the memory check starts (default: half the "
                             "run, at most 10 minutes)")
    parser.add_argument("--slope", type=float, default=None,
                        help="MiB per 10 minutes the controller may grow after the warm-up "
                             "(default: 1 for runs from 30 minutes; shorter runs are still "
                             "warming up, and are held to a ceiling instead)")
    parser.add_argument("--budget-mb", type=float, default=64.0,
                        help="MONARCH_TELEMETRY_MB of the job (small: the bounds fill soon)")
    parser.add_argument("--deadline", type=float, default=90.0,
                        help="seconds a call may take before it counts as a hang")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    long = args.minutes >= 10
    args.every = args.every or ([20.0, 40.0] if long else [6.0, 12.0])
    args.sample = args.sample or (60.0 if long else 10.0)
    args.warmup = args.warmup if args.warmup is not None else min(args.minutes * 30, 600)
    args.slope = args.slope if args.slope is not None else (1.0 if args.minutes >= 30 else None)
    return run(args)


def run(args: argparse.Namespace) -> int:
    run_dir = tempfile.mkdtemp(prefix="soak-")
    env = dict(os.environ, MONARCH_RUN_DIR=run_dir, MONARCH_HISTORY="1",
               MONARCH_HISTORY_MB="4096", MONARCH_TELEMETRY_MB=str(args.budget_mb))
    watch = Watch(run_dir, args.sample).start()
    child = subprocess.Popen(
        [sys.executable, str(JOB), "--minutes", str(args.minutes), "--every",
         *map(str, args.every), "--seed", str(args.seed), "--deadline", str(args.deadline)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=run_dir,
        start_new_session=True)
    watch.controller = child.pid
    timer = threading.Timer(args.minutes * 60 + 240, lambda: os.killpg(child.pid,
                                                                     signal.SIGKILL))
    timer.start()
    try:
        return _watch(args, run_dir, watch, child, timer)
    finally:  # whatever happened here, nothing of the job outlives this harness
        for pid, _ in ours(run_dir):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(run_dir, ignore_errors=True)


def _watch(args: argparse.Namespace, run_dir: str, watch: Watch, child: Any,
           timer: threading.Timer) -> int:
    summary: dict[str, Any] = {}
    job: dict[str, Any] = {}
    assert child.stdout is not None
    for line in child.stdout:
        if not line.startswith("{"):
            continue  # the actors' own lines (the job's stdout)
        try:
            item = json.loads(line)
        except ValueError:  # not one of the job's lines after all
            continue
        if "job" in item:
            job = item["job"]
            watch.survivor = job.get("survivor")
        elif "summary" in item:
            summary = item["summary"]
        elif ("fault" in item or "progress" in item or "census" in item
              or "workload_error" in item):
            print(f"soak: {line.strip()}", flush=True)
        elif "stacks" in item:  # a workload failed: where everything was
            for where, dump in item["stacks"].items():
                print(f"soak: stack of {where}:\n{dump}", flush=True)
    rc = child.wait()
    timer.cancel()
    watch.stop()
    left = ours(run_dir)
    deadline = time.monotonic() + 30
    while left and time.monotonic() < deadline:  # procs exit within seconds of their job
        time.sleep(0.5)
        left = ours(run_dir)
    for pid, _ in left:
        os.kill(pid, signal.SIGKILL)
    counts = history_counts(run_dir, job["job_id"]) if job else {}
    failed = check(summary, counts, watch.samples, left, args, rc)
    report = {"minutes": args.minutes, "summary": summary, "history": counts,
              "samples": watch.samples, "failed": failed}
    print_report(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    return 1 if failed else 0


def print_report(report: dict[str, Any]) -> None:
    summary = report["summary"]
    print(f"\n== soak: {report['minutes']:g} min, {len(summary.get('faults', []))} faults "
          f"({', '.join(sorted({f['kind'] for f in summary.get('faults', [])}))})")
    print("counts:", json.dumps(summary.get("counts", {})))
    print("  t(s)  controller MiB (floor)/fds/threads   survivor MiB   workers MiB")
    for s in report["samples"]:
        ctl = s.get("controller", {})
        workers = " ".join(f"{w['rss_mb']:.0f}" for w in s.get("workers", {}).values())
        floor = f"({ctl['rss_floor_mb']:6.1f})" if "rss_floor_mb" in ctl else " " * 8
        print(f"{s['t']:6.0f}  {ctl.get('rss_mb', 0):7.1f} {floor} {ctl.get('fds', 0):4d} "
              f"{ctl.get('threads', 0):3d}        {s.get('survivor', {}).get('rss_mb', 0):7.1f}"
              f"       {workers}")
    for token, got in sorted(report["history"].items()):
        print(f"counter {token}: answered {summary.get('acked', {}).get(token)}, history "
              f"lines {got.get('lines')}, spans {got.get('spans')}")
    print("PASS" if not report["failed"] else "FAIL:\n  " + "\n  ".join(report["failed"]))


if __name__ == "__main__":
    sys.exit(main())
