"""`monarch top` (the console) and `monarch demo` (a sample workload with the console on it)."""

from __future__ import annotations

import json
import os
import signal
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import typer

from monarch.console import REFRESH_S

EXIT_FAILED, EXIT_NO_JOB = 1, 3


def register(app: typer.Typer) -> None:
    """Adds `top` and `demo` to the `monarch` command."""
    app.command("top")(top)
    app.command("demo")(demo)


def top(
    ctx: typer.Context,
    addr: str | None = typer.Option(None, "--addr", help="host:port of the admin API "
                                       "(default: the newest job in your run directory)."),
    token: str | None = typer.Option(None, "--token", envvar="MONARCH_ADMIN_TOKEN",
                                        help="The admin API token (default: from admin.json)."),
    job: str | None = typer.Option(None, "--job", help="Job id, when several run."),
    diagnose: bool = typer.Option(False, "--diagnose", help="Ping every proc, print the "
                                  "report as JSON and exit 0 (all pass/slow) or 1."),
    refresh: float = typer.Option(REFRESH_S, "--refresh", min=0.1, help="Seconds between polls."),
    read_only: bool = typer.Option(False, "--read-only", help="Look, never touch: kill, stop, "
                                   "break and attach are refused."),
) -> None:
    """The console of a running job: topology, logs, spans, transfers; kill, stop, pdb.
    With --job ID of a job that has ended (or crashed): its history, read-only."""
    client = _connect(ctx, addr, token, job)
    if diagnose:
        report = _admin_call(client.diagnose)
        typer.echo(json.dumps(report, indent=2, default=str))
        raise typer.Exit(0 if report.get("ok") else EXIT_FAILED)
    from monarch.console.app import MonarchTop

    MonarchTop(client, refresh=refresh, read_only=read_only).run()


def demo(
    loggers: int = typer.Option(0, "--loggers", help="Add N chatty actors streaming logs."),
    grid: int = typer.Option(64, "--grid", help="Ranks of the `workers` mesh (dp x tp), one "
                             "lagging: `v` shows it as a grid (0: none)."),
    refresh: float = typer.Option(REFRESH_S, "--refresh", min=0.1, help="Seconds between polls."),
    run_for: float = typer.Option(0.0, "--run-for", help="End the workload after N seconds "
                                  "(0: when the console quits)."),
    no_console: bool = typer.Option(False, "--no-console", help="Only run the workload (print "
                                    "its job id; stop it with Ctrl-C)."),
    keep_log: bool = typer.Option(False, "--keep-log", help="Keep the workload's log (and "
                                  "control directory) after it stopped; removed otherwise."),
) -> None:
    """A sample multi-mesh workload with the console on it (F fails a rank, B breaks).

    The workload (trainers, generators, rewards, an inspector) runs as its own controller
    process; the console attaches to it through the admin API, and the workload stops when the
    console quits. In the console, `F` makes trainers[3] fail, `B` stops inspector[0] at a
    breakpoint (select it, `a` attaches pdb).
    """
    control = Path(tempfile.mkdtemp(prefix="monarch-demo-"))
    log = control / "workload.log"
    command = [sys.executable, "-m", "monarch.console._demo", "--control", str(control),
               "--loggers", str(loggers), "--run-for", str(run_for), "--grid", str(grid)]
    with open(log, "wb") as out:
        workload = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    preexec_fn=_term_with_parent)
    ending = _Ending(workload, control, log, keep_log)
    signal.signal(signal.SIGHUP, ending.hangup)  # the terminal closed: clean up and leave
    signal.signal(signal.SIGTERM, _raise_exit)
    try:
        typer.echo(f"monarch demo: starting the workload (pid {workload.pid}, log {log})",
                   err=True)
        client = wait_for_admin(workload, log)
        if no_console:
            typer.echo(client.info.get("job_id"))
            workload.wait()
            return
        from monarch.console._demo_top import DemoTop

        console = DemoTop(client, control, refresh=refresh)
        signal.signal(signal.SIGTERM, console.note_signal)  # never raised inside Textual
        console.run()  # SIGTERM ends it as `q` does
        signal.signal(signal.SIGTERM, _raise_exit)  # its loop's handler went with it
    except (KeyboardInterrupt, SystemExit):
        pass
    finally:
        ending.clean_up()


class _Ending:
    """What `monarch demo` does when it ends: stop the workload, remove its log (once)."""

    def __init__(self, workload: subprocess.Popen[bytes], control: Path, log: Path,
                 keep_log: bool) -> None:
        self.workload, self.control, self.log, self.keep_log = workload, control, log, keep_log
        self.done = False

    def clean_up(self) -> None:
        """Done once; a hangup's handler that interrupts it does it whole (the interrupted
        call never resumes: the handler ends the process)."""
        if self.done:
            return
        stop_workload(self.workload, self.control)
        said = f"its output: {self.log}"
        if not self.keep_log:
            shutil.rmtree(self.control, ignore_errors=True)
            said = f"its log {self.log} was removed; --keep-log keeps it"
        self.done = True
        typer.echo(f"monarch demo: workload stopped ({said})", err=True)

    def hangup(self, signum: int, frame: Any) -> None:
        """SIGHUP: the terminal is gone. Textual cannot end without it (its writer thread dies
        on the first failed write, then its bounded queue blocks every later one; its input
        thread spins on the dead terminal and holds the interpreter's exit), so the workload
        is stopped here, in the handler, and the process ends at once."""
        try:
            self.clean_up()
        except BaseException:  # noqa: BLE001 - nothing can be printed: the terminal is gone
            pass
        finally:
            os._exit(128 + signum)


def wait_for_admin(workload: subprocess.Popen[bytes], log: Path, timeout: float = 120.0) -> Any:
    """The admin client of the job `workload` runs, once its discovery file is there."""
    from monarch.admin import AdminClient, discover

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if workload.poll() is not None:
            tail = log.read_text(errors="replace")[-2000:]
            typer.echo(f"monarch demo: the workload exited ({workload.returncode}):\n{tail}",
                       err=True)
            raise typer.Exit(EXIT_FAILED)
        mine = [i for i in discover() if i.get("pid") == workload.pid]
        if mine:
            return AdminClient(mine[0]["address"], mine[0]["token"], mine[0])
        time.sleep(0.1)
    typer.echo("monarch demo: the workload's admin API did not come up", err=True)
    raise typer.Exit(EXIT_FAILED)


def stop_workload(workload: subprocess.Popen[bytes], control: Path) -> None:
    """Asks the workload to stop (its control file, then SIGTERM twice), kills it if it
    lingers."""
    if workload.poll() is not None:
        return
    (control / "stop").touch()
    for _ in range(2):
        try:
            workload.wait(timeout=20)
            return
        except subprocess.TimeoutExpired:
            workload.terminate()
    try:
        workload.wait(timeout=5)
    except subprocess.TimeoutExpired:
        workload.kill()
        workload.wait()


def _term_with_parent() -> None:
    """In the workload, before exec: SIGTERM when `monarch demo` dies (Linux), so a killed
    console never leaves the workload behind."""
    import ctypes

    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _raise_exit(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def _connect(ctx: typer.Context, addr: str | None, token: str | None, job: str | None) -> Any:
    from monarch.admin import NoJobError, connect

    opts = (ctx.find_root().obj or {}) if ctx is not None else {}
    try:
        chosen = connect(addr or opts.get("addr"), token or opts.get("token"),
                         job or opts.get("job"))
        if not (addr or opts.get("addr") or job or opts.get("job")):
            from ._common import say_which

            say_which(chosen.info)
        return chosen
    except NoJobError as exc:
        job = job or opts.get("job")
        if job and not addr:  # an ended job: its history, read-only
            from monarch._history._client import HistoryClient

            from ._common import history_or_fail

            return HistoryClient(history_or_fail(job))
        typer.echo(f"monarch: error: {exc}", err=True)
        raise typer.Exit(EXIT_NO_JOB) from None
    except ValueError as exc:  # --addr that is not host:port
        typer.echo(f"monarch: error: --addr: {exc}", err=True)
        raise typer.Exit(2) from None


def _admin_call(fn: Any) -> Any:
    from monarch.admin import AdminError

    try:
        return fn()
    except AdminError as exc:
        typer.echo(f"monarch: error: {exc}", err=True)
        raise typer.Exit(EXIT_NO_JOB if exc.status is None else EXIT_FAILED) from None
