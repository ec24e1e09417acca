"""The controller process as a whole: fail-fast by default, and no orphans whatever happens."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import alive, wait_gone

pytestmark = pytest.mark.timeout(120)

PRELUDE = textwrap.dedent('''
    import os, signal, sys, time
    from monarch.actor import Actor, endpoint, this_host

    class A(Actor):
        @endpoint
        def pid(self):
            return os.getpid()

        @endpoint
        def exit1(self):
            os._exit(1)

        @endpoint
        def explode(self):
            raise RuntimeError("boom in broadcast")

        @endpoint
        def wait(self, seconds):
            time.sleep(seconds)
''')


def script(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "controller.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return path


@pytest.mark.parametrize("failure, reason", [
    ("mesh.slice(gpus=0).exit1.call_one().get()",
     "the process this actor was running on exited with non-zero code 1"),
    ("mesh.slice(gpus=1).explode.broadcast(); mesh.slice(gpus=0).wait.call_one(60).get()",
     "RuntimeError: boom in broadcast"),
])
def test_unhandled_failure_ends_the_controller_even_while_blocked(tmp_path, failure, reason):
    path = script(tmp_path, f'''
        procs = this_host().spawn_procs(per_host={{"gpus": 2}})
        mesh = procs.spawn("doomed", A)
        mesh.pid.call().get()
        started = time.monotonic()
        {failure}
        print("not reached", flush=True)
    ''')
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=90, cwd=tmp_path)
    assert out.returncode != 0
    assert "not reached" not in out.stdout
    assert "Unhandled monarch error on the root actor, hostname=" in out.stderr
    assert "The actor <root>.<__main__.A doomed{'gpus': " in out.stderr
    assert reason in out.stderr


def test_the_interrupt_of_an_unhandled_failure_is_not_lost_in_a_finalizer(tmp_path):
    """Python drops a KeyboardInterrupt raised inside `__del__` ("Exception ignored"): the
    fault's interrupt is sent again until it ends the main thread, which here spends nearly all
    its time in finalizers."""
    path = script(tmp_path, '''
        class Slow:
            def __del__(self):
                total = 0
                for i in range(20000):
                    total += i

        procs = this_host().spawn_procs(per_host={"gpus": 1})
        mesh = procs.spawn("doomed", A)
        mesh.pid.call().get()
        mesh.explode.broadcast()
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline:
            Slow()
        print("not reached", flush=True)
    ''')
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=90, cwd=tmp_path)
    assert "not reached" not in out.stdout, out.stderr[-3000:]
    assert out.returncode != 0
    assert "Unhandled monarch error on the root actor, hostname=" in out.stderr
    assert "KeyboardInterrupt" in out.stderr
    assert "Exception ignored" not in out.stderr


def test_a_fault_ends_a_script_started_with_sigint_ignored(tmp_path):
    """A script started in the background by a shell (`python train.py &` in a batch script)
    inherits SIGINT ignored, and Python sets no handler: the fault's interrupt was dropped and
    the script went on ("not reached", status 0). It ends now, and a SIGINT from outside is
    still ignored, as its parent asked."""
    path = script(tmp_path, '''
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        mesh = procs.spawn("doomed", A)
        mesh.pid.call().get()
        os.kill(os.getpid(), signal.SIGINT)  # from outside: ignored, as before
        mesh.pid.call().get()
        print("still here", flush=True)
        mesh.slice(gpus=1).explode.broadcast(); mesh.slice(gpus=0).wait.call_one(60).get()
        print("not reached", flush=True)
    ''')
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=90, cwd=tmp_path,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
    assert out.stdout.splitlines() == ["still here"], out.stderr[-3000:]
    assert out.returncode == -signal.SIGINT  # ended by SIGINT, as an uncaught Ctrl-C
    assert "Unhandled monarch error on the root actor, hostname=" in out.stderr
    assert "RuntimeError: boom in broadcast" in out.stderr


def test_a_scripts_sigterm_handler_is_not_swallowed_by_our_code_at_collections(tmp_path):
    """A signal handler runs at the main thread's next bytecode; an exception it raises inside
    a `gc.callbacks` hook is printed ("Exception ignored in: <function _on_collection>") and
    lost. The admin API's cost counter had such a hook: a benchmark's job, told to end by its
    SIGTERM handler (`sys.exit`), went on and its 16 `ProcessJob` hosts outlived it. The
    controller runs no code of ours at collections; the handler ends a busy script."""
    path = script(tmp_path, '''
        import gc, json
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(3))
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        mesh = procs.spawn("busy", A)
        mesh.pid.call().get()
        from monarch.admin import connect
        connect().topology()  # the admin API has served a request
        print(json.dumps([getattr(c, "__module__", "?") for c in gc.callbacks]), flush=True)
        while True:
            mesh.pid.call().get()
    ''')
    child = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True,
                             stderr=subprocess.PIPE, cwd=tmp_path)
    try:
        hooks = json.loads(child.stdout.readline())
        assert not [m for m in hooks if m.startswith(("monarch", "telemetry"))], hooks
        child.send_signal(signal.SIGTERM)
        try:
            code = child.wait(timeout=60)
        except subprocess.TimeoutExpired:  # where it hangs, for whoever reads the failure
            spy = Path(sys.executable).with_name("py-spy")
            dump = subprocess.run([str(spy), "dump", "--pid", str(child.pid)],
                                  capture_output=True, text=True, timeout=60)
            raise AssertionError(f"SIGTERM did not end the script:\n{dump.stdout[-6000:]}")
        assert code == 3, child.stderr.read()[-3000:]
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


@pytest.mark.parametrize("ending", ["sigkill", "exit", "exception"])
def test_no_orphans_when_the_controller_ends(tmp_path, ending):
    finish = {
        "sigkill": "time.sleep(60)",
        "exit": "os._exit(0)",
        "exception": "raise SystemExit('controller gives up')",
    }[ending]
    path = script(tmp_path, f'''
        procs = this_host().spawn_procs(per_host={{"gpus": 3}})
        mesh = procs.spawn("orphans", A)
        pids = list(mesh.pid.call().get().values())
        from monarch._controller._job import current_job
        print(__import__("json").dumps({{"procs": pids, "zygote": current_job().agent.zygote_pid}}),
              flush=True)
        sys.stdin.readline()  # the test checked that everything is alive
        {finish}
    ''')
    child = subprocess.Popen([sys.executable, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        started = json.loads(child.stdout.readline())
        pids = [*started["procs"], started["zygote"]]
        assert all(alive(p) for p in pids)  # the controller is still waiting for our line
        if ending == "sigkill":
            child.send_signal(signal.SIGKILL)
        else:
            child.stdin.write("end\n")
            child.stdin.flush()
        child.wait(timeout=60)
        wait_gone(*pids)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_run_directory_is_private_and_removed(tmp_path):
    path = script(tmp_path, '''
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        procs.spawn("x", A).pid.call().get()
        from monarch._controller._job import current_job
        run_dir = current_job().run_dir
        print(oct(run_dir.stat().st_mode & 0o777), oct(run_dir.parent.stat().st_mode & 0o777),
              run_dir, flush=True)
    ''')
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=90, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    mode, parent_mode, run_dir = out.stdout.split()
    assert mode == "0o700" and parent_mode == "0o700"
    assert not Path(run_dir).exists()


def test_a_new_job_sweeps_run_directories_of_dead_controllers(tmp_path):
    run_root = tmp_path / "run"
    env = dict(os.environ, MONARCH_RUN_DIR=str(run_root))
    path = script(tmp_path, '''
        procs = this_host().spawn_procs(per_host={"gpus": 1})
        procs.spawn("x", A).pid.call().get()
        from monarch._controller._job import current_job
        print(current_job().run_dir, flush=True)
        time.sleep(60)
    ''')
    child = subprocess.Popen([sys.executable, str(path)], stdout=subprocess.PIPE, text=True,
                             cwd=tmp_path, env=env)
    dead_dir = Path(child.stdout.readline().strip())
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert dead_dir.exists()  # a SIGKILLed controller cannot clean up after itself
    (run_root / "someone-else").mkdir()  # fresh, without an owner yet: left alone
    out = subprocess.run([sys.executable, "-c", textwrap.dedent('''
        from monarch.actor import context
        context()
        from monarch._controller._job import current_job
        print(current_job().run_dir)
    ''')], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert not dead_dir.exists() and (run_root / "someone-else").exists()


def _zygotes_of(pid: int) -> list[int]:
    """The zygotes (`monarch._proc._zygote`) whose parent is `pid`."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and b"monarch._proc._zygote" in cmdline:
            found.append(int(entry))
    return found


def test_the_local_zygote_starts_with_the_job_and_a_job_that_does_not_start_leaves_none(
        tmp_path):
    """The controller starts its zygote first thing at the job's start (its imports run beside
    the controller's own), before any `spawn_procs`; a setting that stops the job from starting
    lets it go."""
    path = tmp_path / "start.py"
    path.write_text(textwrap.dedent(f'''
        import json, os, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        from test_controller_lifetime import _zygotes_of
        from waiting import wait_until
        from monarch.actor import this_host

        os.environ["MONARCH_TELEMETRY_MB"] = "lots"
        try:
            this_host()
        except ValueError as exc:
            refused = str(exc)
        wait_until(lambda: not _zygotes_of(os.getpid()), "the unused zygote to end")
        os.environ["MONARCH_TELEMETRY_MB"] = "64"
        this_host()  # starts the job: its zygote runs before any spawn_procs
        early = _zygotes_of(os.getpid())
        print(json.dumps({{"refused": refused, "early": early}}), flush=True)
    '''))
    out = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                         timeout=90, cwd=tmp_path, env=dict(os.environ,
                                                            MONARCH_RUN_DIR=str(tmp_path / "run")))
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert "MONARCH_TELEMETRY_MB" in result["refused"] and len(result["early"]) == 1
    wait_gone(*result["early"])  # and it ended with the script
