"""A proc whose bootstrap raised tells the controller why (`bootstrap_failed`, on its own link)
and exits 1; its exit reaches the controller on the host agent's link, so the two may come in
either order. Either way `ProcMesh.initialized` reports the bootstrap's error and supervision
hears nothing (loaded run 3 saw the exit first: "ended before it was ready (failed)").

The controller's bookkeeping (`Supervisor`) on a real runtime whose loop runs, fed the two
events in the order the race produces."""

from __future__ import annotations

import os

import pytest
from waiting import wait_until

from monarch._controller._supervisor import RUNNING, ProcRecord, Supervisor
from monarch._runtime._errors import ActorError
from monarch._runtime._identity import ProcessIdentity
from monarch._runtime._process_runtime import ProcessRuntime
from monarch._wire import _serial

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def controller(tmp_path, fault_log):  # fault_log: a root failure is logged, not raised
    identity = ProcessIdentity("job", os.urandom(32), tmp_path, "controller")
    runtime = ProcessRuntime(identity, f"ipc://{tmp_path}/ctl.sock")
    runtime.start()
    failures: list = []
    supervisor = Supervisor(runtime, on_failure=failures.append)
    record = ProcRecord("bootorder-0", "bootorder", 0, f"ipc://{tmp_path}/bootorder-0.sock", "host",
                        state=RUNNING, bootstrapping=True)
    supervisor.add_proc(record)
    yield runtime, supervisor, record, failures
    runtime.close()


def on_loop(runtime, fn) -> None:
    runtime.call_soon(fn)


def test_the_exit_before_the_why_still_reports_the_bootstrap_error(controller):
    runtime, supervisor, record, failures = controller
    ready = []
    on_loop(runtime, lambda: ready.append(supervisor.ready("bootorder", [0])))
    seen = []
    on_loop(runtime, lambda: (supervisor.proc_gone(record, 1),  # the agent's news came first
                              seen.append(record.state)))
    error = _serial.dumps((RuntimeError("no GPU here"), "Traceback: ..."))[0]
    on_loop(runtime, lambda: supervisor.bootstrap_failed({"proc": "bootorder-0", "error": error}))
    wait_until(lambda: ready, "readiness asked")
    with pytest.raises(ActorError, match="bootstrap of proc mesh bootorder failed") as caught:
        ready[0].get(timeout=30)
    assert "no GPU here" in str(caught.value.exception)
    assert seen == ["running"]  # its end waited for the why
    wait_until(lambda: record.state == "failed", "the proc recorded as ended")
    assert record.status == 1 and record.exit_waiting is None
    assert not failures  # initialized told it: not a supervision event


def test_an_exit_1_with_no_why_ends_the_proc_once_its_notices_had_time(controller):
    runtime, supervisor, record, failures = controller
    ready = []
    on_loop(runtime, lambda: ready.append(supervisor.ready("bootorder", [0])))
    on_loop(runtime, lambda: supervisor.proc_gone(record, 1))
    wait_until(lambda: ready, "readiness asked")
    with pytest.raises(RuntimeError, match="ended before it was ready"):
        ready[0].get(timeout=30)
    wait_until(lambda: failures, "the owner hears of the proc's end")
    assert "exited with non-zero code 1" in failures[0]["report"]
    assert record.state == "failed" and record.status == 1


def test_a_signal_during_the_bootstrap_is_not_waited_on(controller):
    runtime, supervisor, record, _ = controller
    seen = []
    on_loop(runtime, lambda: (supervisor.proc_gone(record, -9), seen.append(record.state)))
    wait_until(lambda: seen, "the proc's end handled")
    assert seen == ["failed"]  # at once: a bootstrap that raised exits 1, not by a signal
