"""Supervision and fault injection: failures are detected fast, reported well, and never hang.

Every test kills or breaks procs of its own mesh. The session's fault hook (see conftest)
collects the failures that reach the root instead of ending the test run.
"""

from __future__ import annotations

import contextlib
import ctypes
import asyncio
import os
import sys
import random
import signal
import threading

import pytest
from waiting import wait_until

from monarch.actor import Actor, ActorError, SupervisionError, context, endpoint, this_host

pytestmark = pytest.mark.timeout(120)


class Victim(Actor):
    def __init__(self) -> None:
        self.cleaned = False

    @endpoint
    def ok(self) -> int:
        return context().actor_instance.rank.rank

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def exit1(self) -> None:
        os._exit(1)

    @endpoint
    def kill9(self) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    @endpoint
    def segfault(self) -> None:
        ctypes.string_at(0)

    @endpoint
    def hang(self) -> None:
        threading.Event().wait()

    @endpoint
    def explode(self) -> None:
        raise RuntimeError("boom in broadcast")

    @endpoint
    def abort(self) -> None:
        context().actor_instance.abort("giving up")

    @endpoint
    def size_of(self, data: bytearray) -> int:
        return len(data)


class BadInit(Actor):
    def __init__(self) -> None:
        raise RuntimeError("init failed")

    @endpoint
    def ok(self) -> int:
        return 1


class Owner(Actor):
    """Spawns a child mesh and supervises it."""

    def __init__(self, handle: bool) -> None:
        self.handle = handle
        self.seen: list[str] = []
        self.child = this_host().spawn_procs(per_host={"gpus": 2})
        self.victims = self.child.spawn("owned", Victim)

    @endpoint
    def child_pids(self) -> list[int]:
        return list(self.victims.pid.call().get(timeout=30).values())

    @endpoint
    def kill_child(self) -> None:
        self.victims.slice(gpus=1).kill9.broadcast()

    @endpoint
    def supervised(self) -> list[str]:
        return self.seen

    def __supervise__(self, failure) -> bool:
        self.seen.append(failure.report())
        return self.handle


def fresh(n: int = 4):
    return this_host().spawn_procs(per_host={"gpus": n})


def about(mesh_name: str):
    return lambda failure: failure.name == mesh_name


def test_sigkill_fails_in_flight_and_later_calls_fast_and_survivors_work(fault_log):
    procs = fresh()
    mesh = procs.spawn("killed", Victim)
    assert list(mesh.ok.call().get().values()) == [0, 1, 2, 3]
    pids = list(mesh.pid.call().get().values())
    hanging = mesh.slice(gpus=2).hang.call_one()
    os.kill(pids[2], signal.SIGKILL)
    with pytest.raises(SupervisionError) as info:
        hanging.get(timeout=20)  # in flight on the dead proc: fails, never hangs
    assert str(info.value) == (
        "Endpoint call killed.hang() failed, The actor <root>.<test_supervision.Victim "
        "killed{'gpus': 2/4}> and all its descendants have failed:\n"
        "  the process this actor was running on failed: Killed(sig=9)")
    with pytest.raises(SupervisionError, match="Killed"):
        mesh.ok.call().get(timeout=20)  # includes the dead rank
    with pytest.raises(SupervisionError):
        mesh.slice(gpus=2).ok.call_one().get(timeout=20)
    survivors = mesh.slice(gpus=slice(0, 2))
    assert list(survivors.ok.call().get(timeout=20).values()) == [0, 1]
    failure = fault_log.wait_for(about("killed"))
    assert failure.rank == 2 and failure.signal == 9 and failure.pid and failure.host
    assert failure.class_name == "test_supervision.Victim"
    again = fresh(2).spawn("recovered", Victim)
    assert list(again.ok.call().get(timeout=20).values()) == [0, 1]


@pytest.mark.parametrize("method, reason", [
    ("exit1", "the process this actor was running on exited with non-zero code 1"),
    ("segfault", "the process this actor was running on failed: Killed(sig=11)"),
])
def test_process_deaths_are_reported_with_their_cause(fault_log, method, reason):
    procs = fresh(2)
    mesh = procs.spawn(f"dies_{method}", Victim)
    mesh.ok.call().get()
    with pytest.raises(SupervisionError) as info:
        getattr(mesh.slice(gpus=0), method).call_one().get(timeout=20)
    assert str(info.value).endswith(reason)
    failure = fault_log.wait_for(about(f"dies_{method}"))
    assert failure.report().endswith(reason)
    assert mesh.slice(gpus=1).ok.call_one().get(timeout=20) == 1


def test_exception_in_init_is_a_supervision_event(fault_log, procs):
    mesh = procs.spawn("bad_init", BadInit)
    with pytest.raises(SupervisionError) as info:
        mesh.ok.call().get(timeout=20)
    text = str(info.value)
    assert text.startswith("Endpoint call bad_init.ok() failed, The actor <root>.<test_supervision"
                           ".BadInit bad_init{'gpus': ")
    assert "actor explicitly aborted due to: Traceback (most recent call last):" in text
    assert "RuntimeError: init failed" in text
    failure = fault_log.wait_for(about("bad_init"))
    assert 'raise RuntimeError("init failed")' in failure.report()


def test_exception_in_broadcast_fails_the_actor(fault_log, procs):
    mesh = procs.spawn("exploder", Victim)
    mesh.slice(gpus=1).explode.broadcast()
    failure = fault_log.wait_for(about("exploder"))
    assert "actor explicitly aborted due to: " in failure.report()
    assert "RuntimeError: boom in broadcast" in failure.report()
    with pytest.raises(SupervisionError, match="boom in broadcast"):
        mesh.slice(gpus=1).ok.call_one().get(timeout=20)
    assert mesh.slice(gpus=0).ok.call_one().get(timeout=20) == 0


def test_abort_from_inside_an_actor(fault_log, procs):
    mesh = procs.spawn("aborter", Victim)
    with pytest.raises(SupervisionError, match="giving up"):  # the call it aborted in fails
        mesh.slice(gpus=3).abort.call_one().get(timeout=20)
    failure = fault_log.wait_for(about("aborter"))
    assert "actor explicitly aborted due to: giving up" in failure.report()
    with pytest.raises(SupervisionError):
        mesh.slice(gpus=3).ok.call_one().get(timeout=20)


@pytest.mark.parametrize("knob", ["process_exit_timeout", "mesh_terminate_timeout"])
def test_hanging_endpoint_times_out_and_stop_ends_it(fault_log, knob):
    from monarch._controller._job import current_job
    from monarch.config import configured

    procs = fresh(2)
    mesh = procs.spawn("hangs", Victim)
    pids = list(mesh.pid.call().get().values())
    stuck = mesh.slice(gpus=0).hang.call_one()
    with pytest.raises(TimeoutError):
        stuck.get(timeout=0.2)
    # the stuck proc is killed once the sooner of the two knobs passed
    with configured(**{"process_exit_timeout": "10m", "mesh_terminate_timeout": "10m",
                       knob: "1s"}):
        procs.stop().get(timeout=30)
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    record = current_job().supervisor.procs[f"{procs._procs}-0"]
    assert record.status == -signal.SIGKILL  # killed, not exited on its own
    with pytest.raises(SupervisionError):
        stuck.get(timeout=20)


def test_actor_owner_supervises_its_child_mesh(fault_log, procs):
    owner = procs.spawn("owner_ok", Owner, True).slice(gpus=0)
    owner.child_pids.call_one().get(timeout=30)
    owner.kill_child.call_one().get(timeout=30)
    wait_until(lambda: owner.supervised.call_one().get(timeout=20), "__supervise__ was called")
    report = owner.supervised.call_one().get()[0]
    assert "owned{'gpus': 1/2}" in report and "Killed(sig=9)" in report
    assert not [f for f in fault_log.failures if f.name in ("owned", "owner_ok")]


class _Catching(Actor):
    """Owns a child mesh whose failures it handles (and counts)."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.victims = this_host().spawn_procs(per_host={"gpus": 2}).spawn("caught", Victim)

    def __supervise__(self, failure) -> bool:
        self.seen.append(failure.report())
        return True


class CatchingOwner(_Catching):
    @endpoint
    async def fail_child(self) -> int:
        """How many failures `__supervise__` had seen when the call raised."""
        with pytest.raises(SupervisionError):
            await self.victims.abort.call()
        return len(self.seen)


class SyncCatchingOwner(_Catching):
    @endpoint
    def fail_child(self) -> None:
        with pytest.raises(SupervisionError):
            self.victims.abort.call().get(timeout=30)

    @endpoint
    def supervised(self) -> list[str]:
        return self.seen


@contextlib.contextmanager
def _busy_controller():
    """This process (the controller) holds its GIL in 0.3 s slices: its I/O thread, which
    forwards failures to owners, runs late."""
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            sum(range(10_000))

    interval = sys.getswitchinterval()
    sys.setswitchinterval(0.3)
    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    try:
        yield
    finally:
        stop.set()
        spinner.join()
        sys.setswitchinterval(interval)


def test_a_call_that_raised_supervision_error_finds_supervise_already_queued(fault_log):
    """Monarch's order: the owner's `__supervise__` is queued before its own call to the
    failed child raises, so it has run by the time the owner handles anything else (an async
    owner: before the `await` returns). The failing proc tells the owner directly, ahead of
    refusing the call; through the controller it arrived one hop late."""
    procs = fresh(1)
    owner = procs.spawn("catcher", CatchingOwner)
    sync_owner = procs.spawn("sync_catcher", SyncCatchingOwner)
    owner.initialized.get(timeout=60)
    sync_owner.initialized.get(timeout=60)
    with _busy_controller():  # the controller's hop is slow: the order must not rest on it
        assert owner.fail_child.call_one().get(timeout=60) >= 1
        sync_owner.fail_child.call_one().get(timeout=60)
        seen = sync_owner.supervised.call_one().get(timeout=30)
    assert seen and "giving up" in seen[0]
    assert not [f for f in fault_log.failures if f.name in ("catcher", "sync_catcher")]
    procs.stop().get(timeout=60)


def _children(pid: int) -> set[int]:
    """The pids whose parent is `pid` (from /proc)."""
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        found.add(int(entry))
            except (OSError, IndexError, ValueError):
                pass
    return found


class BareOwner(Actor):
    """Spawns procs that host no actor and supervises them."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.bare = None

    @endpoint
    def spawn_bare(self) -> None:
        self.bare = this_host().spawn_procs(per_host={"gpus": 1}, name="bare")
        assert self.bare.initialized.get(timeout=30) is True  # up, and known to the controller

    @endpoint
    def supervised(self) -> list[str]:
        return self.seen

    def __supervise__(self, failure) -> bool:
        self.seen.append(failure.report())
        return True


def test_death_of_a_bare_proc_goes_to_the_actor_that_spawned_it(fault_log, procs):
    """A proc with no actor on it still has an owner: the actor that spawned its mesh."""
    owner = procs.spawn("bare_owner", BareOwner).slice(gpus=0)
    owner.supervised.call_one().get(timeout=30)
    zygotes = [p for p in _children(os.getpid())
               if b"_zygote" in open(f"/proc/{p}/cmdline", "rb").read()]
    before = set().union(*(_children(z) for z in zygotes))
    owner.spawn_bare.call_one().get(timeout=30)  # returns once the bare proc answered
    new = set().union(*(_children(z) for z in zygotes)) - before
    assert len(new) == 1, new
    os.kill(new.pop(), signal.SIGKILL)
    wait_until(lambda: owner.supervised.call_one().get(timeout=20), "__supervise__ was called")
    report = owner.supervised.call_one().get()[0]
    assert "of proc mesh bare-" in report and "Killed(sig=9)" in report, report
    assert not [f for f in fault_log.failures if f.name.startswith("bare")]


def _pid_then_wait(pid_file: str) -> None:
    """A proc mesh's bootstrap that writes the proc's pid, then holds the proc (30 s at most)
    for the test to kill it."""
    import time

    with open(pid_file + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(pid_file + ".tmp", pid_file)
    time.sleep(30)  # nothing to wait for: the test SIGKILLs this process


def test_death_of_a_proc_before_its_actor_started_fails_the_actor_mesh(fault_log, tmp_path):
    """The spawner tells the controller what it spawned where: a proc killed before its actor
    started (so before the proc could announce it) fails that actor, not just the proc."""
    pid_file = str(tmp_path / "pid")
    procs = this_host().spawn_procs(per_host={"gpus": 1}, name="unborn_procs",
                                    bootstrap=lambda: _pid_then_wait(pid_file))
    mesh = procs.spawn("unborn", Victim)  # held in the proc until its bootstrap returns
    wait_until(lambda: os.path.exists(pid_file), "the bootstrap to start")
    os.kill(int(open(pid_file).read()), signal.SIGKILL)
    failure = fault_log.wait_for(about("unborn"))
    assert failure.report().startswith("The actor <root>.<test_supervision.Victim unborn"), \
        failure.report()
    assert "Killed(sig=9)" in failure.report()
    assert not [f for f in fault_log.failures if f.name.startswith("unborn_procs")]
    with pytest.raises(SupervisionError):
        mesh.ok.call_one().get(timeout=20)
    procs.stop().get(timeout=30)


def test_death_of_a_proc_after_its_actors_stopped_is_a_proc_failure(fault_log):
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="afterstop")
    mesh = procs.spawn("stopped_then_killed", Victim)
    pids = list(mesh.pid.call().get(timeout=30).values())
    mesh.stop().get(timeout=30)
    os.kill(pids[1], signal.SIGKILL)
    failure = fault_log.wait_for(lambda f: f.name.startswith("afterstop-"))
    assert "of proc mesh afterstop-" in failure.report() and "Killed(sig=9)" in failure.report()
    assert not [f for f in fault_log.failures if f.name == "stopped_then_killed"]
    procs.stop().get(timeout=30)


def test_unhandled_child_failure_escalates_to_the_owner_and_root(fault_log, procs):
    owner = procs.spawn("owner_no", Owner, False).slice(gpus=0)
    owner.child_pids.call_one().get(timeout=30)
    owner.kill_child.call_one().get(timeout=30)
    failure = fault_log.wait_for(about("owner_no"))
    assert "did not handle it" in failure.report() and "owned" in failure.report()
    with pytest.raises(SupervisionError):
        owner.supervised.call_one().get(timeout=20)


def test_one_gib_argument(procs):
    mesh = procs.spawn("big", Victim)
    data = bytearray(1 << 30)
    assert mesh.slice(gpus=0).size_of.call_one(data).get(timeout=60) == 1 << 30


def test_kill_random_ranks_under_steady_load(fault_log):
    """Every call either succeeds or raises a clear error: nothing is lost, nothing hangs."""
    procs = fresh(4)
    mesh = procs.spawn("load", Victim)
    pids = list(mesh.pid.call().get().values())
    outcomes = {"ok": 0, "supervision": 0}
    issued = 0
    stop = threading.Event()
    errors: list[BaseException] = []

    def load() -> None:
        nonlocal issued
        rank = 0
        while not stop.is_set():
            issued += 1
            try:
                mesh.slice(gpus=rank % 4).ok.call_one().get(timeout=20)
                outcomes["ok"] += 1
            except SupervisionError:
                outcomes["supervision"] += 1
            except BaseException as exc:  # noqa: BLE001 - anything else is a test failure
                errors.append(exc)
            rank += 1

    threads = [threading.Thread(target=load) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        wait_until(lambda: outcomes["ok"] >= 30, "the load is running")
        for pid in random.Random(7).sample(pids, 2):
            os.kill(pid, signal.SIGKILL)
        fault_log.wait_count(about("load"), 2)
        wait_until(lambda: outcomes["supervision"] >= 1, "calls to the dead ranks failed")
        answered = outcomes["ok"]
        wait_until(lambda: outcomes["ok"] >= answered + 30, "the survivors still answer")
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=60)
    assert not errors and not any(t.is_alive() for t in threads)
    assert outcomes["ok"] + outcomes["supervision"] == issued
    assert len([f for f in fault_log.failures if f.name == "load"]) == 2


def test_failures_are_kept_with_their_details(fault_log):
    from monarch._controller._job import current_job

    procs = fresh(2)
    mesh = procs.spawn("recorded", Victim)
    mesh.ok.call().get()
    with pytest.raises(SupervisionError):
        mesh.slice(gpus=1).exit1.call_one().get(timeout=20)
    fault_log.wait_for(about("recorded"))
    kept = [f for f in current_job().supervisor.failures if f["mesh_name"] == "recorded"]
    assert kept and kept[0]["exit_code"] == 1 and kept[0]["rank"] == 1
    assert kept[0]["class_name"] == "test_supervision.Victim" and kept[0]["pid"]


def test_remote_error_still_an_actor_error(procs):
    mesh = procs.spawn("not_fatal", Victim)
    with pytest.raises(ActorError):
        mesh.slice(gpus=0).size_of.call_one(None).get(timeout=20)
    assert mesh.slice(gpus=0).ok.call_one().get(timeout=20) == 0


class Tidy(Actor):
    """Reports its cleanup through a port, and can stop itself."""

    def __init__(self, port) -> None:
        self.port = port

    @endpoint
    def ok(self) -> int:
        return 1

    @endpoint
    def quit(self) -> None:
        context().actor_instance.stop("done for today")

    def __cleanup__(self, exc) -> None:
        self.port.send(f"cleaned {context().actor_instance.rank.rank} {exc}")


def test_cleanup_runs_on_stop_and_instance_stop(procs):
    from monarch.actor import Channel

    port, receiver = Channel.open()
    mesh = procs.spawn("tidy", Tidy, port)
    mesh.slice(gpus=slice(0, 2)).stop().get(timeout=20)
    assert sorted(receiver.recv().get(timeout=10) for _ in range(2)) == [
        "cleaned 0 None", "cleaned 1 None"]
    with pytest.raises(SupervisionError, match="actor was stopped"):
        mesh.slice(gpus=0).ok.call_one().get(timeout=20)
    mesh.slice(gpus=3).quit.call_one().get(timeout=20)
    assert receiver.recv().get(timeout=10) == "cleaned 3 None"
    with pytest.raises(SupervisionError, match="done for today"):
        mesh.slice(gpus=3).ok.call_one().get(timeout=20)
    assert mesh.slice(gpus=2).ok.call_one().get(timeout=20) == 1


class Chatty(Actor):
    @endpoint
    def say(self, lines: list[str]) -> None:
        for line in lines:
            print(line, flush=True)

    @endpoint
    def exit1(self) -> None:
        os._exit(1)


def test_a_dead_proc_brings_the_tail_of_its_output(fault_log):
    from monarch._controller._job import current_job
    from monarch.config import configured

    procs = fresh(1)
    mesh = procs.spawn("tailed", Chatty)
    mesh.say.call_one([f"tail line {i}" for i in range(5)]).get(timeout=30)
    store = current_job().store
    wait_until(lambda: store.logs(text="tail line 4"), "the lines in the store")
    with configured(tail_log_lines=3):
        with pytest.raises(SupervisionError):
            mesh.exit1.call_one().get(timeout=30)
        failure = fault_log.wait_for(about("tailed"))
    assert failure.log_tail == ["[stdout] tail line 2", "[stdout] tail line 3",
                                "[stdout] tail line 4"]


class FailsAtInit(Actor):
    def __init__(self) -> None:
        raise ValueError("no device")

    @endpoint
    def noop(self) -> None:
        pass


def test_a_hook_that_sets_an_asyncio_event_wakes_the_clients_loop(fault_log):
    """A fault hook runs on a thread of its own; one that sets an asyncio.Event of the
    client's loop without call_soon_threadsafe (as Monarch's own tests do) is still seen: the
    loop is woken after the hook (here it has nothing else to wake it, so the test would hang
    until its timeout)."""
    import monarch.actor

    async def main() -> list:
        seen, ready = [], asyncio.Event()

        def hook(failure) -> None:
            seen.append(failure.report())
            ready.set()  # not thread-safe, on purpose

        saved, monarch.actor.unhandled_fault_hook = monarch.actor.unhandled_fault_hook, hook
        try:
            procs = fresh(1)
            procs.spawn("fails_at_init", FailsAtInit)
            await ready.wait()
        finally:
            monarch.actor.unhandled_fault_hook = saved
        await procs.stop()
        return seen

    assert "no device" in asyncio.run(main())[0]
