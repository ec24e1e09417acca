"""More than one host: host workers on their own loopback addresses, attached over tcp."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import time

import pytest

from monarch.actor import (Actor, SupervisionError, attach_to_workers, current_rank, endpoint,
                           this_host)

pytestmark = pytest.mark.timeout(120)


class Where(Actor):
    @endpoint
    def where(self) -> dict:
        from monarch import _process

        runtime = _process.current()
        return {"point": dict(current_rank()), "address": runtime.address, "pid": os.getpid()}

    @endpoint
    def relay(self, other: object) -> list:
        return sorted(v["point"]["gpus"] for v in other.where.call().get(timeout=30).values())


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@pytest.fixture
def workers(monkeypatch, fault_log):
    secret = secrets.token_hex(16)
    monkeypatch.setenv("MONARCH_WORKER_SECRET", secret)
    started = []
    addresses = []
    for host in ("127.0.0.2", "127.0.0.3"):
        address = f"tcp://{host}:{free_port(host)}"
        child = subprocess.Popen([sys.executable, "-m", "monarch._host.worker", "--address",
                                  address], stdout=subprocess.PIPE, text=True,
                                 env=dict(os.environ, MONARCH_WORKER_SECRET=secret))
        assert "listening" in child.stdout.readline()
        started.append(child)
        addresses.append(address)
    yield addresses, started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait(timeout=30)


def test_mesh_spans_hosts_and_survives_losing_one(workers, fault_log):
    addresses, children = workers
    hosts = attach_to_workers(workers=addresses)
    assert hosts.extent.labels == ["hosts"] and len(hosts) == 2
    procs = hosts.spawn_procs(per_host={"gpus": 2})
    assert procs.sizes == {"hosts": 2, "gpus": 2}
    mesh = procs.spawn("spread", Where)
    found = mesh.where.call().get(timeout=60)
    by_host = {}
    for point, info in found.items():
        assert info["address"].startswith(f"tcp://127.0.0.{2 + point['hosts']}:")
        by_host.setdefault(point["hosts"], []).append(info["pid"])
    assert len(by_host) == 2
    # actor -> actor across hosts, and a local mesh calling a remote one
    assert mesh.slice(hosts=0, gpus=0).relay.call_one(mesh.slice(hosts=1)).get(
        timeout=30) == [0, 1]
    local = this_host().spawn_procs(per_host={"gpus": 1}).spawn("local_caller", Where)
    assert local.relay.call_one(mesh.slice(hosts=0)).get(timeout=30) == [0, 1]

    children[1].send_signal(signal.SIGKILL)  # the whole second host goes away
    failure = fault_log.wait_for(lambda f: f.mesh_name == "spread" and "was lost" in f.report(),
                                 timeout=30)
    assert "127.0.0.3" in failure.report()
    with pytest.raises(SupervisionError, match="was lost"):
        mesh.slice(hosts=1, gpus=0).where.call_one().get(timeout=30)
    assert len(mesh.slice(hosts=0).where.call().get(timeout=30)) == 2
    deadline = time.monotonic() + 20
    for pid in by_host[1]:  # the lost host's procs did not outlive their worker
        while True:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                break
            assert time.monotonic() < deadline, f"proc {pid} outlived its host"
            time.sleep(0.05)


def test_wrong_worker_secret_is_refused(workers, monkeypatch):
    addresses, _ = workers
    monkeypatch.setenv("MONARCH_WORKER_SECRET", "not the secret")
    with pytest.raises(TimeoutError, match="MONARCH_WORKER_SECRET"):
        from monarch._controller import _remote

        _remote.attach_to_workers(addresses[:1], timeout=2.0)
