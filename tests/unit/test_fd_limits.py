"""A process can hold sockets to more than 1,023 peers (`_runtime/_fd_limits`): zmq's default
cap and a soft open-file limit of 1,024 would stop a controller past ~110 hosts of 8 procs."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import os, resource, shutil, sys, tempfile
    import zmq
    from monarch._runtime._identity import ProcessIdentity
    from monarch._runtime._process_runtime import ProcessRuntime

    print("soft before", resource.getrlimit(resource.RLIMIT_NOFILE)[0])
    tmp = tempfile.mkdtemp(prefix="fd-")
    runtime = ProcessRuntime(ProcessIdentity("job", os.urandom(32), tmp, "controller"),
                             f"ipc://{tmp}/ctl.sock")
    sockets = []
    try:
        for i in range(1500):  # one per peer, as the outbox holds them
            sock = runtime.ctx.socket(zmq.DEALER)
            sock.connect(f"ipc://{tmp}/peer-{i}.sock")
            sockets.append(sock)
        print("opened", len(sockets), "cap", runtime.max_peers)
    finally:
        for sock in sockets:
            sock.close(0)
        runtime.close()
        shutil.rmtree(tmp, ignore_errors=True)
""")


def _low_soft_limit() -> None:
    """The child starts as on many hosts: soft limit 1,024, a hard limit well above."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, max(hard, 8192)))


def test_a_runtime_holds_more_than_1023_sockets_from_a_soft_limit_of_1024():
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True,
                          timeout=120, preexec_fn=_low_soft_limit)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "soft before 1024" in done.stdout
    assert "opened 1500" in done.stdout
