"""More than one host: host workers on their own loopback addresses, attached over tcp."""

from __future__ import annotations

import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys

import pytest
from waiting import wait_gone, wait_until

from monarch._runtime._rundir import run_root, sweep_dead
from monarch.actor import (Actor, SupervisionError, attach_to_workers, current_rank, endpoint,
                           this_host)

pytestmark = pytest.mark.timeout(120)


class Where(Actor):
    @endpoint
    def call_other(self, other: object) -> str:
        """What a call to `other` (one actor) raised, by type and message."""
        try:
            other.where.call_one().get(timeout=20)
        except Exception as exc:  # noqa: BLE001 - reported to the test
            return f"{type(exc).__name__}: {exc}"
        return "answered"

    @endpoint
    def where(self) -> dict:
        from monarch._runtime import _process_runtime as _process

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
def workers(monkeypatch, fault_log, tmp_path):
    """Two workers on 127.0.0.2 and 127.0.0.3; their stderr goes to `tmp_path/worker-N.err`."""
    secret = secrets.token_hex(16)
    monkeypatch.setenv("MONARCH_WORKER_SECRET", secret)
    started = []
    addresses = []
    for n, host in enumerate(("127.0.0.2", "127.0.0.3")):
        address = f"tcp://{host}:{free_port(host)}"
        with open(tmp_path / f"worker-{n}.err", "w") as stderr:
            child = subprocess.Popen([sys.executable, "-m", "monarch._host.worker", "--address",
                                      address], stdout=subprocess.PIPE, stderr=stderr, text=True,
                                     env=dict(os.environ, MONARCH_WORKER_SECRET=secret))
        assert "listening" in child.stdout.readline()
        started.append(child)
        addresses.append(address)
    yield addresses, started
    for child in started:
        if child.poll() is None:
            child.terminate()  # a worker ends through its cleanup on SIGTERM
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait(timeout=30)
            raise
    sweep_dead(run_root())  # what the next job would do for a SIGKILLed worker's directory


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
    failure = fault_log.wait_for(lambda f: f.name == "spread" and "was lost" in f.report(),
                                 timeout=30)
    assert "127.0.0.3" in failure.report()
    with pytest.raises(SupervisionError, match="was lost"):
        mesh.slice(hosts=1, gpus=0).where.call_one().get(timeout=30)
    assert len(mesh.slice(hosts=0).where.call().get(timeout=30)) == 2
    wait_gone(*by_host[1])  # the lost host's procs did not outlive their worker


def test_a_spawn_the_hosts_do_not_answer_fails_at_its_deadline(workers, fault_log,
                                                             monkeypatch):
    """host_spawn_ready_timeout / mesh_proc_spawn_max_idle bound a proc mesh's spawn on other
    hosts: the procs that did not start fail (their owner hears), the spawn raises why, and a
    proc that starts after that is stopped, not left running."""
    from monarch._controller import _remote
    from monarch._controller._job import current_job
    from monarch.config import configured

    # the stopped host must not be declared lost meanwhile (a slow machine takes > 5 s here)
    monkeypatch.setattr(_remote, "SILENCE_S", 120.0)

    addresses, children = workers
    hosts = attach_to_workers(workers=addresses)
    assert hosts.initialized.get(timeout=60)
    children[0].send_signal(signal.SIGSTOP)  # the first host takes no fork request
    try:
        with configured(host_spawn_ready_timeout="2s", mesh_proc_spawn_max_idle="2s"):
            with pytest.raises(RuntimeError, match=r"procs \(on [^)]*127\.0\.0\.2[^)]*\) did "
                                                   r"not start within (host_spawn_ready_timeout|"
                                                   r"mesh_proc_spawn_max_idle)=2s"):
                hosts.spawn_procs(per_host={"gpus": 1}, name="late")
        failure = fault_log.wait_for(lambda f: "did not start within" in f.report(),
                                     timeout=30)
        assert "late" in failure.report()
    finally:
        children[0].send_signal(signal.SIGCONT)
    records = [r for r in current_job().supervisor.procs.values() if r.procs.startswith("late")]
    assert len(records) == 2
    started = wait_until(lambda: [r.pid for r in records if r.pid] if all(
        r.pid for r in records) else None, "the late host to fork its proc anyway")
    wait_gone(*started)  # stopped once they announced themselves: nothing left running


def test_a_proc_started_after_a_death_knows_of_it(workers, fault_log):
    """A proc on another host learns its address only once it runs, so the deaths before it
    were never sent to it: it hears of them when it starts, and its call to a dead proc fails
    at once instead of waiting on an address nobody listens at."""
    addresses, children = workers
    hosts = attach_to_workers(workers=addresses)
    victim = hosts.slice(hosts=0).spawn_procs(name="victim").spawn("victim", Where)
    pid = victim.where.call_one().get(timeout=60)["pid"]
    os.kill(pid, signal.SIGKILL)
    fault_log.wait_for(lambda f: f.name == "victim", timeout=30)
    late = hosts.slice(hosts=1).spawn_procs(name="late").spawn("late", Where)
    outcome = late.call_other.call_one(victim).get(timeout=60)
    assert outcome.startswith("SupervisionError") and "Killed(sig=9)" in outcome, outcome


def test_a_worker_stopped_longer_than_the_silence_window_keeps_its_procs(workers, fault_log,
                                                                       monkeypatch, tmp_path):
    """A worker that was itself not running (SIGSTOP, a starved or suspended host) cannot tell
    whether its controller spoke meanwhile: the heartbeats wait unread in its inbox. Once it
    runs again it reads them; it does not release the controller and kill its procs."""
    import time

    from monarch._controller import _remote
    from monarch._controller._job import current_job
    from monarch._host import worker

    monkeypatch.setattr(_remote, "SILENCE_S", 120.0)  # the controller keeps the host meanwhile
    addresses, children = workers
    hosts = attach_to_workers(workers=addresses)
    mesh = hosts.spawn_procs(per_host={"gpus": 1}).spawn("kept", Where)
    pids = [v["pid"] for v in mesh.where.call().get(timeout=60).values()]
    children[0].send_signal(signal.SIGSTOP)
    try:
        time.sleep(worker.SILENCE_S + 1.5)  # sleep-ok: the stop must outlast the window
    finally:
        children[0].send_signal(signal.SIGCONT)
    record = current_job().workers.hosts[addresses[0]]
    beats: list[float] = []

    def beating() -> bool:  # each heartbeat the controller hears is one tick of the worker
        if not beats or record.heard != beats[-1]:
            beats.append(record.heard)
        return len(beats) > 3
    wait_until(beating, "three heartbeats from the worker after it resumed")
    assert sorted(v["pid"] for v in mesh.where.call().get(timeout=30).values()) == sorted(pids)
    assert "released" not in (tmp_path / "worker-0.err").read_text()
    assert not [f for f in fault_log.failures if f.name == "kept"]


def test_a_worker_paused_past_the_heartbeat_is_lost_and_its_procs_end(workers, fault_log,
                                                                      tmp_path):
    """A pause (or a partition) longer than the controller's heartbeat window is a host
    failure reported to the owner; when the worker runs again it hears that it was lost and
    ends what it ran for the job (no zombie on the far side), and it can be attached anew."""
    from monarch._controller import _remote

    addresses, children = workers
    hosts = attach_to_workers(workers=addresses)
    mesh = hosts.slice(hosts=0).spawn_procs(per_host={"gpus": 1}).spawn("paused", Where)
    (pid,) = [v["pid"] for v in mesh.where.call().get(timeout=60).values()]
    children[0].send_signal(signal.SIGSTOP)
    try:
        failure = fault_log.wait_for(lambda f: f.name == "paused", timeout=30)
        assert "was lost: no heartbeat" in failure.report()
        from monarch._runtime import _process_runtime as _process

        outbox = _process.current().outbox  # the lost host's socket is closed, not kept
        wait_until(lambda: addresses[0] not in outbox._links, "the lost host's link to go")
    finally:
        children[0].send_signal(signal.SIGCONT)
    wait_gone(pid)  # its procs end themselves
    wait_until(lambda: "the controller lost this host" in (tmp_path / "worker-0.err")
               .read_text(), "the worker to say why it released the job")
    again = _remote.attach_to_workers(addresses[:1], timeout=30.0)
    fresh = again.spawn_procs(per_host={"gpus": 1}).spawn("after_pause", Where)
    assert fresh.where.call_one().get(timeout=60)["pid"] != pid


def test_wrong_worker_secret_is_refused(workers, monkeypatch, tmp_path):
    """The worker refuses (and counts) a controller that does not know its secret; the
    controller gives up with a hint instead of hanging."""
    from monarch._controller import _remote

    addresses, _ = workers
    secret = os.environ["MONARCH_WORKER_SECRET"]
    monkeypatch.setenv("MONARCH_WORKER_SECRET", "not the secret")
    with pytest.raises(RuntimeError, match="attach failed.*MONARCH_WORKER_SECRET"):
        _remote.attach_to_workers(addresses[:1], timeout=2.0)
    refusal = wait_until(lambda: re.search(r"refused (\d+) connection\(s\) that did not prove "
                                           r"the worker secret",
                                           (tmp_path / "worker-0.err").read_text()),
                         "the worker to report the refusal")
    assert int(refusal.group(1)) >= 1
    assert "refused" not in (tmp_path / "worker-1.err").read_text()  # not asked: not refused
    # The same address again, with the right secret: the failed attempt's link (and its
    # credentials) is not reused (a replaced Slurm allocation's workers reuse addresses).
    monkeypatch.setenv("MONARCH_WORKER_SECRET", secret)
    hosts = _remote.attach_to_workers(addresses[:1], timeout=30.0)
    assert hosts.initialized.get(timeout=60)
    found = hosts.spawn_procs().spawn("after_refusal", Where).where.call().get(timeout=60)
    assert [info["address"].split(":")[1] for info in found.values()] == ["//127.0.0.2"]


def _worker(address: str, **popen: object) -> subprocess.Popen:
    """A worker started as Monarch's docs start one, trusting every connection."""
    code = ("from monarch.actor import run_worker_loop_forever; "
            f"run_worker_loop_forever(address={address!r}, ca='trust_all_connections')")
    env = {k: v for k, v in os.environ.items() if k != "MONARCH_WORKER_SECRET"}
    return subprocess.Popen([sys.executable, "-c", code], env=env, **popen)  # type: ignore


def test_workers_on_ipc_and_inherited_sockets_with_trust_all(tmp_path, fault_log):
    """Worker loops on an ipc path and on a listening socket handed over as a file descriptor;
    `ca="trust_all_connections"` on both sides needs no worker secret."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    children = [_worker(f"ipc://{tmp_path}/w0"),
                _worker(f"tcp://127.0.0.1:fd{listener.fileno()}", pass_fds=(listener.fileno(),))]
    listener.close()
    try:
        hosts = attach_to_workers(ca="trust_all_connections",
                                  workers=[f"ipc://{tmp_path}/w0", f"tcp://127.0.0.1:{port}"])
        assert hosts.initialized.get(timeout=60) is True
        mesh = hosts.spawn_procs(per_host={"gpus": 1}).spawn("anywhere", Where)
        found = mesh.where.call().get(timeout=60)
        assert [p["hosts"] for p, _ in found.items()] == [0, 1]
        assert {info["pid"] for _, info in found.items()}.isdisjoint({os.getpid()})
    finally:
        for child in children:
            child.terminate()
            child.wait(timeout=30)
        sweep_dead(run_root())


def test_a_worker_on_an_alias_address_dials_one_and_binds_another(fault_log):
    """`tcp://DIAL:P@tcp://0.0.0.0:P`: the worker binds the wildcard and is known (attached,
    listed, addressed) by what controllers dial."""
    port = free_port("127.0.0.1")
    alias = f"tcp://127.0.0.1:{port}@tcp://0.0.0.0:{port}"
    child = _worker(alias)
    try:
        hosts = attach_to_workers(ca="trust_all_connections", workers=[alias])
        mesh = hosts.spawn_procs(per_host={"gpus": 2}).spawn("aliased", Where)
        found = mesh.where.call().get(timeout=60)
        assert sorted(p["gpus"] for p, _ in found.items()) == [0, 1]
        assert all(i["address"].startswith("tcp://127.0.0.1:") for _, i in found.items())
        assert hosts._hosts == (f"tcp://127.0.0.1:{port}",)
        assert hosts.shutdown().get(timeout=60) is None
        # shutdown ends the host's worker too (run_worker_loop_forever returns)
        assert child.wait(timeout=60) == 0
        wait_gone(*(i["pid"] for _, i in found.items()))
    finally:
        if child.poll() is None:
            child.terminate()
            child.wait(timeout=30)
        sweep_dead(run_root())


def test_attach_to_an_absent_worker_fails_at_first_use(tmp_path):
    from monarch.config import configured

    with configured(mesh_attach_config_timeout="500ms"):
        hosts = attach_to_workers(ca="trust_all_connections",
                                  workers=[f"ipc://{tmp_path}/nobody"])
        for _ in range(2):  # every observer gets the same error
            with pytest.raises(RuntimeError, match="attach failed: config push failed") as info:
                hosts.initialized.get(timeout=30)
            assert f"{tmp_path}/nobody" in str(info.value)
        with pytest.raises(RuntimeError, match="attach failed"):
            hosts.spawn_procs(per_host={"gpus": 1})


def test_tls_arguments_are_refused_not_ignored():
    with pytest.raises(ValueError, match="not TLS certificates"):
        attach_to_workers(ca="/etc/ssl/ca.pem", workers=["tcp://127.0.0.1:1"])
    with pytest.raises(ValueError, match="private_key is not supported"):
        attach_to_workers(private_key="/etc/ssl/key.pem", workers=["tcp://127.0.0.1:1"])


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("unshare"),
                    reason="needs root and unshare (a network namespace of its own)")
def test_a_new_proc_on_a_dead_procs_tcp_port_is_not_taken_for_it():
    """The kernel hands a stopped proc's tcp port to a later proc: that proc is not refused as
    the dead one (the controller and every proc that heard of the death forget it), and its
    mesh is not taken for stopped. Forced in a network namespace of ~10 usable ports."""
    script = os.path.join(os.path.dirname(__file__), "port_reuse_script.py")
    command = ("ip link set lo up && sysctl -qw net.ipv4.ip_local_port_range='41000 41019' && "
               f"exec {shlex.quote(sys.executable)} {shlex.quote(script)} 60")
    child = subprocess.Popen(["unshare", "-n", "sh", "-c", command], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True,
                             env=dict(os.environ, PYTHONPATH=os.path.dirname(script)))
    try:
        out, err = child.communicate(timeout=100)
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait(timeout=30)
    assert child.returncode == 0, err[-3000:]
    result = json.loads(out.strip().splitlines()[-1])
    assert "error" not in result, result
    assert result.get("reused"), f"no port came back in {result['rounds']} rounds: {result}"


def test_a_worker_signalled_again_while_ending_still_removes_its_run_directory(tmp_path):
    """scancel's SIGTERM reaches a Slurm worker twice (slurmstepd, and srun forwarding it): a
    SIGTERM that lands while the worker is ending cuts nothing short; its run directory goes."""
    run = tmp_path / "run"
    ready = tmp_path / "ready.json"
    child = subprocess.Popen([sys.executable, "-m", "monarch._host.worker", "--address",
                              "tcp://127.0.0.1:0", "--ready-file", str(ready)],
                             env=dict(os.environ, MONARCH_RUN_DIR=str(run),
                                      MONARCH_WORKER_SECRET=secrets.token_hex(16)),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        wait_until(lambda: ready.exists() or child.poll() is not None, "the worker to listen",
                   timeout=60)
        assert child.poll() is None, child.stderr.read()[-2000:]
        assert [p.name.startswith("worker-") for p in run.iterdir()] == [True]
        while child.poll() is None:  # SIGTERMs, one after another, until it has ended
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(timeout=0.002)
            except subprocess.TimeoutExpired:
                pass
        assert list(run.iterdir()) == [], child.stderr.read()[-2000:]
        assert child.returncode == 128 + signal.SIGTERM  # through its handler, once
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=30)
        sweep_dead(run)


def test_a_worker_on_a_background_thread_leaves_no_run_directory_when_its_process_exits(
        tmp_path):
    """start_worker_loop_forever's worker is cut off when its process exits; its run directory
    goes with the process."""
    run = tmp_path / "run"
    code = ("import pathlib, sys\n"
            "from monarch.actor import start_worker_loop_forever\n"
            "start_worker_loop_forever(address='tcp://127.0.0.1:0', ca='trust_all_connections')\n"
            "from waiting import wait_until\n"
            f"wait_until(lambda: list(pathlib.Path({str(run)!r}).glob('worker-*/worker.json')), "
            "'the worker up', timeout=120)\n"
            "print('serving', flush=True)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, env=dict(os.environ, MONARCH_RUN_DIR=str(run),
                                               PYTHONPATH=os.path.dirname(__file__)))
    assert out.returncode == 0 and "serving" in out.stdout, out.stderr[-2000:]
    assert list(run.iterdir()) == []


def test_a_worker_that_cannot_listen_fails_and_leaves_no_run_directory(tmp_path):
    run = tmp_path / "run"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"tcp://127.0.0.1:{taken.getsockname()[1]}"
        out = subprocess.run([sys.executable, "-m", "monarch._host.worker", "--address",
                              address], capture_output=True, text=True, timeout=120,
                             env=dict(os.environ, MONARCH_RUN_DIR=str(run),
                                      MONARCH_WORKER_SECRET=secrets.token_hex(16)))
    assert out.returncode == 1 and "Address already in use" in out.stderr, out.stderr[-2000:]
    assert list(run.iterdir()) == []
