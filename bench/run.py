"""Runs bench_api.py under our interpreter and Monarch's, interleaved, and compares (MISSION §8).

    python bench/run.py [--rounds 2] [--quick] [--only call_one,...] [--ours PY] [--ref PY]

Rounds alternate ours, ref, ours, ref, ... so that load from elsewhere on the machine falls on
both sides alike; each metric's median over its side's rounds goes in the table. The table is
printed (Markdown) and written with the raw runs to bench/results/ (gitignored). A side that
fails shows its error; the other side's figures stay, and the exit status is 1.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "bench" / "bench_api.py"
RESULTS = ROOT / "bench" / "results"
REF_PYTHON = "/opt/ref/venv/bin/python"
REF_PATIENCE = {f"HYPERACTOR_MESH_{key}_MAX_IDLE": "120s"
                for key in ("GET_ACTOR_STATE", "ACTOR_SPAWN", "GET_PROC_STATE")}
"""Monarch's waits for its proc agents' answers, 30 s by default, made 120 s on its side (the
environment's own values win): at 64 procs x 16 meshes on this 2-core machine its agents,
busy with the scale rows' bursts, missed the 30 s and it declared the meshes failed ("timeout
waiting for message from proc mesh agent"), so `scale1k` measured nothing of it in three runs
in a row (2026-11-27/29). A longer wait takes nothing from its speed; with it, it ran."""


@dataclass(frozen=True)
class Target:
    """A goal for one metric: on the ratio ours/monarch, or on our figure alone."""

    op: str  # "ratio<=", "ratio>=", "ours<=", "ours>="
    bound: float

    @property
    def text(self) -> str:
        sign = "≤" if self.op.endswith("<=") else "≥"
        return (
            f"{sign} {self.bound:g}×" if self.op.startswith("ratio") else f"{sign} {self.bound:g}"
        )

    def met(self, ours: float | None, ratio: float | None) -> bool | None:
        value = ratio if self.op.startswith("ratio") else ours
        if value is None:
            return None
        return value <= self.bound if self.op.endswith("<=") else value >= self.bound


@dataclass(frozen=True)
class AllOf:
    """Several goals for one metric, all to be met."""

    targets: tuple[Target, ...]

    @property
    def text(self) -> str:
        return " and ".join(t.text for t in self.targets)

    def met(self, ours: float | None, ratio: float | None) -> bool | None:
        results = [t.met(ours, ratio) for t in self.targets]
        return None if None in results else all(results)


LATENCY = Target("ratio<=", 0.5)
RATE = Target("ratio>=", 3.0)
NO_STEEPER = Target("ratio<=", 1.0)  # a growth figure: ours grows no faster than Monarch's

# MISSION §8. Metrics absent here are shown without a target.
TARGETS: dict[str, Target | AllOf] = {
    "spawn_4procs_first_answer_s": Target("ratio<=", 1.0),
    "call_one_p50_us": AllOf((Target("ours<=", 150), Target("ratio<=", 0.3))),
    "call_one_p99_us": LATENCY,
    "call_4actors_p50_us": Target("ratio<=", 0.4),
    "bytes_64MiB_oneway_GBps": Target("ratio>=", 2.0),
    "pipelined_call_one_per_s": RATE,
    "broadcast_4actors_casts_per_s": RATE,
    "tensor_64MiB_oneway_GBps": RATE,
    "tensor_64MiB_echo_GBps": RATE,
    # Rows with an absolute target on our side.
    "death_to_error_ms": Target("ours<=", 1000),  # "well under a second"
    "death_to_supervise_ms": Target("ours<=", 1000),
    "telemetry_overhead_pct": Target("ours<=", 10),
    # issue 33 (scale1k, only when named): the lead held at 1,024 actors
    "call_1024actors_p50_us": Target("ratio<=", 0.3),
    "call_1024actors_printing_p50_us": Target("ratio<=", 0.3),
    "broadcast_1024actors_casts_per_s": RATE,
    "spawn_64procs_16meshes_first_answer_s": Target("ratio<=", 0.3),
    "death_to_error_ms_1024actors": Target("ours<=", 1000),
    "death_to_fault_hook_ms_1024actors": Target("ours<=", 1000),
    "idle_64procs_cpu_pct_of_a_core": Target("ratio<=", 1.0),
    "spawn_16hosts_64procs_16meshes_first_answer_s": Target("ratio<=", 0.3),  # scale1k_hosts
    "call_1024actors_16hosts_p50_us": Target("ratio<=", 0.3),
    "broadcast_1024actors_16hosts_casts_per_s": RATE,
    "rdma_read_256MiB_GBps": Target("ours>=", 3.0),
    "growth_4to64_call_p50_x": NO_STEEPER,
    "growth_4to64_broadcast_slowdown_x": NO_STEEPER,
    "growth_4to64_controller_cpu_x": NO_STEEPER,
    "growth_4to32_spawn_x": NO_STEEPER,
}

# How a figure grows with the mesh (bench_api's `scale` row): (name, at the small size, at the
# large size, whether a larger figure is better). A growth is large/small, or small/large for
# rates, so above 1 always means "costs more at scale".
GROWTH = [
    ("growth_4to64_call_p50_x", "call_4actors_p50_us", "call_64actors_p50_us", False),
    ("growth_4to64_broadcast_slowdown_x", "broadcast_4actors_casts_per_s",
     "broadcast_64actors_casts_per_s", True),
    ("growth_4to64_controller_cpu_x", "controller_cpu_s_per_1k_casts_4actors",
     "controller_cpu_s_per_1k_casts_64actors", False),
    ("growth_4to32_spawn_x", "spawn_4procs_first_answer_s", "spawn_32procs_first_answer_s", False),
]


def with_growth(figures: dict[str, float]) -> dict[str, float]:
    """`figures` plus the growth figures that its scale rows allow."""
    out = dict(figures)
    for name, small, large, rate in GROWTH:
        if figures.get(small) and figures.get(large):
            out[name] = (figures[small] / figures[large]) if rate else (
                figures[large] / figures[small])
    return out


# Rows whose two figures come from different mechanisms: shown side by side, never as a ratio.
NOT_COMPARABLE: dict[str, str] = {
    "rdma_read_": "ours: cross-memory attach (one copy); Monarch on CPU: its TCP backend",
    "rdma_write_": "ours: cross-memory attach (one copy); Monarch on CPU: its TCP backend",
    "memcpy_": "the same in-process copy on both sides: the machine's scale, not a comparison",
    "gloo_": "torch.distributed gloo called directly on both sides: the machine's scale",
    "rpc_floor_": "two plain Python processes, the same code on both sides: the machine's scale",
}


def not_comparable(metric: str) -> str | None:
    """Why a metric's two figures must not be divided, or None."""
    return next((why for prefix, why in NOT_COMPARABLE.items() if metric.startswith(prefix)),
                None)


@dataclass(frozen=True)
class Side:
    name: str  # "ours" or "monarch"
    python: str
    cwd: str
    env: dict[str, str]


@dataclass
class Run:
    side: str
    round: int
    rc: int | None
    seconds: float
    metrics: dict[str, float] = field(default_factory=dict)
    meta: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)
    log: str = ""  # path of the run's stderr


# ---------------------------------------------------------------------------------------------
# The two sides.


def default_ours_python() -> str:
    """The project's .venv; from a git worktree, the main checkout's .venv."""
    candidates = [ROOT / ".venv"]
    common = _git("rev-parse", "--path-format=absolute", "--git-common-dir")
    if common:
        candidates.append(Path(common).parent / ".venv")
    for venv in candidates:
        if (venv / "bin" / "python").exists():
            return str(venv / "bin" / "python")
    return sys.executable


def _git(*args: str) -> str | None:
    try:
        cmd = ["git", "-C", str(ROOT), *args]
        out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    except OSError:
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def make_sides(args: argparse.Namespace) -> list[Side]:
    """Ours imports this checkout's `monarch` (PYTHONPATH); Monarch's runs away from it.

    Monarch starts its procs with `python -m`, which puts the cwd on sys.path, so the reference
    must not run from this repository's root or its procs would import our package.
    """
    base = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    ours_env = {
        **base,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
    }
    sides = [
        Side("ours", args.ours or default_ours_python(), str(ROOT), ours_env),
        Side("monarch", args.ref, tempfile.gettempdir(), {**REF_PATIENCE, **base}),
    ]
    return [side for side in sides if side.name not in args.skip]


# ---------------------------------------------------------------------------------------------
# Running one side once.


MARKER = "MONARCH_BENCH_RUN"
"""Set in each run's environment, which every process it starts inherits (our zygote, which
starts its own session, and its procs; Monarch's procs): what `_sweep` looks for."""


def run_once(side: Side, round_no: int, flags: list[str], timeout: float, logdir: Path) -> Run:
    log_path = logdir / f"{side.name}-{round_no}.stderr"
    marker = f"{logdir.name}-{side.name}-{round_no}-{os.getpid()}"
    start = time.perf_counter()
    with open(log_path, "w") as err:
        proc = subprocess.Popen(
            [side.python, str(SCRIPT), *flags, "--deadline", str(max(30.0, timeout - 30))],
            cwd=side.cwd,
            env={**side.env, MARKER: marker},
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            start_new_session=True,  # its own process group: leftovers can be found and ended
        )
        stdout, timed_out = _wait(proc, timeout)
    run = Run(side.name, round_no, proc.returncode, time.perf_counter() - start, log=str(log_path))
    left = _sweep(proc.pid, marker, side.name)
    if left:
        run.errors["leftovers"] = f"{len(left)} processes outlived the run (killed): {left}"
    _parse(stdout, run)
    if timed_out:
        run.errors["timeout"] = f"run killed after {timeout:.0f}s (figures above are partial)"
    return run


def _wait(proc: subprocess.Popen, timeout: float) -> tuple[str, bool]:
    """Stdout, and whether the run had to be ended (SIGTERM, then SIGKILL 30 s later)."""
    try:
        return proc.communicate(timeout=timeout)[0], False
    except subprocess.TimeoutExpired:
        print(f"  timed out after {timeout:.0f}s: SIGTERM", file=sys.stderr)
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            return proc.communicate(timeout=30)[0], True
        except subprocess.TimeoutExpired:
            _signal_group(proc.pid, signal.SIGKILL)
            return proc.communicate()[0], True


def _sweep(pgid: int, marker: str, side: str) -> list[int]:
    """Processes the run left behind (in its group, or anywhere with its marker in their
    environment) are a bug of that side: report them, end them; their pids."""
    left = set(_marked(marker))
    try:
        os.killpg(pgid, 0)
        left.add(pgid)
    except (ProcessLookupError, PermissionError):
        pass
    if not left:
        return []
    print(f"  WARNING: {side} left processes behind ({sorted(left)}); killing them",
          file=sys.stderr)
    _signal_group(pgid, signal.SIGKILL)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    return sorted(left)


def _marked(marker: str) -> list[int]:
    """Live processes whose environment carries `MARKER=marker`."""
    needle = f"{MARKER}={marker}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0") and \
                    (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                found.append(int(entry.name))
        except (OSError, IndexError):
            continue
    return found


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _parse(stdout: str, run: Run) -> None:
    """The result is the last stdout line that is a JSON object (actors may print too)."""
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                data = json.loads(line)
            except ValueError:
                continue
            run.meta = data.pop("_meta", {})
            run.errors = data.pop("_errors", {})
            run.metrics = {k: float(v) for k, v in data.items() if isinstance(v, (int, float))}
            return
    run.errors = {"run": f"no JSON result (exit {run.rc}); last stderr:\n{_tail(run.log)}"}


def _tail(path: str, lines: int = 15) -> str:
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


# ---------------------------------------------------------------------------------------------
# Comparing.


def medians(runs: list[Run], side: str) -> dict[str, float]:
    values: dict[str, list[float]] = {}
    for run in runs:
        if run.side == side:
            for name, value in run.metrics.items():
                values.setdefault(name, []).append(value)
    return {name: statistics.median(vals) for name, vals in values.items()}


def table_rows(ours: dict[str, float], ref: dict[str, float]) -> list[dict[str, Any]]:
    first, second = (ours, ref) if len(ours) >= len(ref) else (ref, ours)  # fuller side's order
    names = list(first) + [name for name in second if name not in first]
    rows = []
    for name in names:
        mine, theirs = ours.get(name), ref.get(name)
        why_not = not_comparable(name)
        ratio = mine / theirs if mine is not None and theirs and not why_not else None
        target = TARGETS.get(name)
        met = target.met(mine, ratio) if target else None
        rows.append(
            {
                "metric": name,
                "ours": mine,
                "monarch": theirs,
                "ratio": ratio,
                "target": target.text if target else None,
                "met": met,
                "not_comparable": why_not,
            }
        )
    return rows


def fmt(value: float | None) -> str:
    if value is None:
        return "—"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}" if abs(value) < 1 else f"{value:.4g}"


def markdown(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| metric | ours | monarch | ratio (ours/monarch) | target | met? |",
        "|---|---:|---:|---:|---|---|",
    ]
    notes: list[str] = []
    for row in rows:
        met = {True: "yes", False: "**no**", None: "—"}[row["met"]]
        ratio = f"{row['ratio']:.2f}×" if row["ratio"] is not None else "—"
        if row.get("not_comparable"):
            if row["not_comparable"] not in notes:
                notes.append(row["not_comparable"])
            ratio = f"n/a [{notes.index(row['not_comparable']) + 1}]"
        lines.append(
            f"| {row['metric']} | {fmt(row['ours'])} | {fmt(row['monarch'])} | {ratio} "
            f"| {row['target'] or '—'} | {met} |"
        )
    lines += ["", *(f"[{i}] no ratio: {note}." for i, note in enumerate(notes, 1))]
    return "\n".join(lines).rstrip()


def versions(runs: list[Run]) -> str:
    """Which implementation, Python and torch each side ran (from its runs' `_meta`)."""
    seen: dict[str, str] = {}
    for run in runs:
        meta = run.meta
        if meta and run.side not in seen:
            seen[run.side] = (f"{run.side}: {meta.get('version') or '?'}, Python "
                              f"{meta.get('python', '?')}, torch {meta.get('torch') or 'absent'}")
    return "; ".join(seen.values())


def failed(runs: list[Run], sides: list[Side]) -> list[str]:
    """Why the run as a whole failed: a side that exited non-zero, reported errors or
    measured nothing."""
    why = [f"{run.side} round {run.round} exited {run.rc}" for run in runs if run.rc != 0]
    why += [f"{run.side} round {run.round}: {', '.join(run.errors)}" for run in runs
            if run.errors]
    why += [f"{side.name} measured nothing" for side in sides
            if not any(run.metrics for run in runs if run.side == side.name)]
    return why


def error_report(runs: list[Run]) -> str:
    lines = []
    for run in runs:
        for bench, text in run.errors.items():
            lines.append(f"- {run.side} round {run.round}, {bench}: {text.strip()}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ours", help="our interpreter (default: the project's .venv python)")
    parser.add_argument("--ref", default=REF_PYTHON, help=f"Monarch's interpreter ({REF_PYTHON})")
    parser.add_argument("--rounds", type=int, default=2, help="runs per side, interleaved")
    parser.add_argument("--quick", action="store_true", help="small iteration counts")
    parser.add_argument("--only", help="comma-separated bench names (bench_api.py --list)")
    parser.add_argument(
        "--skip", choices=["ours", "monarch"], action="append", default=[], help="leave a side out"
    )
    parser.add_argument("--timeout", type=float, help="seconds per run (default 900, quick 180)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sides = make_sides(args)
    flags = (["--quick"] if args.quick else []) + (["--only", args.only] if args.only else [])
    timeout = args.timeout or (180.0 if args.quick else 900.0)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    logdir = RESULTS / stamp
    logdir.mkdir(parents=True, exist_ok=True)
    runs = []
    for round_no in range(1, args.rounds + 1):
        for side in sides:
            print(f"round {round_no}: {side.name} ({side.python}) ...", file=sys.stderr, flush=True)
            run = run_once(side, round_no, flags, timeout, logdir)
            print(
                f"  {run.seconds:.1f}s, exit {run.rc}, {len(run.metrics)} metrics, "
                f"{len(run.errors)} errors",
                file=sys.stderr,
                flush=True,
            )
            runs.append(run)
    return report(args, sides, runs, logdir)


def report(args: argparse.Namespace, sides: list[Side], runs: list[Run], logdir: Path) -> int:
    rows = table_rows(with_growth(medians(runs, "ours")), with_growth(medians(runs, "monarch")))
    text = markdown(rows)
    errors = error_report(runs)
    mode = "quick" if args.quick else "full"
    head = f"# bench {logdir.name} ({mode}, {args.rounds} rounds, medians)\n\n{versions(runs)}\n\n"
    body = head + text + (f"\n\nErrors:\n{errors}\n" if errors else "\n")
    print(body)
    data = {
        "stamp": logdir.name,
        "mode": mode,
        "rounds": args.rounds,
        "only": args.only,
        "sides": {s.name: s.python for s in sides},
        "rows": rows,
        "runs": [asdict(run) for run in runs],
    }
    for name in (f"{logdir.name}.json", "latest.json"):
        (RESULTS / name).write_text(json.dumps(data, indent=2) + "\n")
    for name in (f"{logdir.name}.md", "latest.md"):
        (RESULTS / name).write_text(body)
    print(
        f"written: {RESULTS / (logdir.name + '.md')} (+ .json, logs in {logdir})", file=sys.stderr
    )
    why = failed(runs, sides)
    for line in why:
        print(f"FAILED: {line}", file=sys.stderr)
    return 1 if why else 0


if __name__ == "__main__":
    sys.exit(main())
