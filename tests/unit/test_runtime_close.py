"""A process runtime closed before it started still lets go of its sockets."""

from __future__ import annotations

import os
import threading

import pytest

from monarch._runtime._future import Future
from monarch._runtime._identity import ProcessIdentity
from monarch._runtime._ports import CallInfo, OneSink
from monarch._runtime._process_runtime import ProcessRuntime

pytestmark = pytest.mark.timeout(60)


def test_a_runtime_closed_before_it_started_frees_its_sockets_and_fails_its_waiters(tmp_path):
    identity = ProcessIdentity("job", os.urandom(32), tmp_path, "controller")
    runtime = ProcessRuntime(identity, f"ipc://{tmp_path}/ctl.sock")
    future: Future = Future._pending()
    runtime.new_port(OneSink(future, "ipc://nowhere", CallInfo("mesh", "noop", str)))
    runtime.close()
    runtime.close()  # twice: nothing left to close
    assert future.done() and future.exception() is not None
    terminated = threading.Event()
    # a zmq context with a socket still open would block here forever
    threading.Thread(target=lambda: (runtime.ctx.term(), terminated.set()), daemon=True).start()
    assert terminated.wait(20)
