"""The actor API on real processes: spawn, every adverb, context, errors, channels, singletons."""

from __future__ import annotations

import asyncio
import os
import pickle
import warnings

import pytest
from waiting import wait_until

from monarch.actor import (Accumulator, Actor, ActorError, Channel, Port, ValueMesh, as_endpoint,
                           concurrent_endpoint, context, current_actor_name, current_rank,
                           current_size, endpoint, get_or_spawn_controller, send, this_host,
                           this_proc)
from monarch.actor import SupervisionError

pytestmark = pytest.mark.timeout(60)


class Echo(Actor):
    def __init__(self, tag: str = "echo") -> None:
        self.tag = tag
        self.seen: list[int] = []

    @endpoint
    def whoami(self) -> dict:
        inst = context().actor_instance
        return {"rank": inst.rank.rank, "point": dict(current_rank()), "size": current_size(),
                "name": current_actor_name(), "tag": self.tag}

    @endpoint
    def add(self, a: int, b: int = 0) -> int:
        return a + b

    @endpoint
    def boom(self, x: int) -> None:
        raise ValueError(f"bad input {x}")

    @endpoint
    def record(self, i: int) -> None:
        self.seen.append(i)

    @endpoint
    def history(self) -> list[int]:
        return self.seen

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint(explicit_response_port=True)
    def twice(self, port: Port, x: int) -> None:
        port.send(x * 2)

    def plain(self, x: int) -> int:
        return x + 100


class AsyncEcho(Actor):
    def __init__(self) -> None:
        self.started: list[int] = []
        self.gate = asyncio.Event()

    @endpoint
    async def add(self, a: int, b: int = 0) -> int:
        await asyncio.sleep(0)
        return a + b

    @concurrent_endpoint
    async def slow(self, i: int, wait: float) -> int:
        self.started.append(i)
        await asyncio.sleep(wait)
        return i

    @concurrent_endpoint
    async def gated(self, i: int) -> int:
        """Returns once `open_gate` was called."""
        self.started.append(i)
        await self.gate.wait()
        return i

    @endpoint
    async def open_gate(self) -> None:
        self.gate.set()

    @endpoint
    async def order(self) -> list[int]:
        return self.started


class Mixed(Actor):
    @endpoint
    def a(self) -> int:
        return 1

    @endpoint
    async def b(self) -> int:
        return 2


class Caller(Actor):
    """Calls a mesh it was handed (actor -> actor messaging)."""

    @endpoint
    def call_other(self, other: object, a: int) -> list[int]:
        values = other.add.call(a, 1).get(timeout=20)  # type: ignore[attr-defined]
        return [v for _, v in values.items()]

    @endpoint
    def send_to(self, port: Port, value: int) -> None:
        port.send(value + context().actor_instance.rank.rank)


class Counter(Actor):
    def __init__(self, start: int) -> None:
        self.n = start

    @endpoint
    def incr(self) -> int:
        self.n += 1
        return self.n


def test_call_returns_value_mesh(procs):
    mesh = procs.spawn("echo_call", Echo, tag="t")
    result = mesh.whoami.call().get()
    assert isinstance(result, ValueMesh)
    assert len(result) == 4 and result.extent.labels == ["gpus"]
    for point, value in result.items():
        assert value["point"] == {"gpus": point["gpus"]}
        assert value["rank"] == point.rank
        assert value["size"] == {"gpus": 4}
        assert value["tag"] == "t"
        assert value["name"] == f"echo_call[{point.rank}]"
    assert repr(result).startswith("ValueMesh({gpus: 4}):\n  (({'gpus': 0/4},")


def test_call_one_and_its_error(procs):
    mesh = procs.spawn("echo_one", Echo)
    assert mesh.slice(gpus=2).add.call_one(40, b=2).get() == 42
    with pytest.raises(ValueError, match="call_one requires exactly 1 actor, but mesh has 4"):
        mesh.add.call_one(1)
    point = mesh.slice(gpus=3).whoami.call_one().get()
    assert point["point"] == {} and point["rank"] == 3


def test_choose_picks_one_rank(procs):
    mesh = procs.spawn("echo_choose", Echo)
    ranks = {mesh.whoami.choose().get()["rank"] for _ in range(30)}
    assert ranks <= {0, 1, 2, 3} and len(ranks) >= 2


def test_stream_yields_every_rank(procs):
    mesh = procs.spawn("echo_stream", Echo)
    futures = list(mesh.whoami.stream())
    assert sorted(f.get()["rank"] for f in futures) == [0, 1, 2, 3]


def test_broadcast_then_call_sees_it_in_order(procs):
    mesh = procs.spawn("echo_bcast", Echo)
    for i in range(50):
        mesh.record.broadcast(i)
    histories = mesh.history.call().get()
    for _, seen in histories.items():
        assert seen == list(range(50))


def test_ordering_under_a_cast_storm(procs):
    """Casts (through the tree) and direct calls from one sender arrive in send order."""
    mesh = procs.spawn("echo_storm", Echo)
    expected: dict[int, list[int]] = {r: [] for r in range(4)}
    for i in range(400):
        if i % 3 == 0:
            mesh.record.broadcast(i)
            for r in range(4):
                expected[r].append(i)
        elif i % 3 == 1:
            r = i % 4
            mesh.slice(gpus=r).record.broadcast(i)
            expected[r].append(i)
        else:
            sub = mesh.slice(gpus=slice(1, 4))
            sub.record.broadcast(i)
            for r in (1, 2, 3):
                expected[r].append(i)
    for point, seen in mesh.history.call().get().items():
        assert seen == expected[point.rank]


def test_actor_error_text_and_survival(procs):
    mesh = procs.spawn("a", Echo)
    with pytest.raises(ActorError) as info:
        mesh.boom.call(3).get()
    err = info.value
    assert isinstance(err.exception, ValueError) and str(err.exception) == "bad input 3"
    text = str(err)
    assert text.startswith("Actor call a.boom failed.\n Traceback of where the remote call failed"
                           " (most recent call last):\n")
    assert 'raise ValueError(f"bad input {x}")' in text
    assert text.rstrip().endswith("ValueError: bad input 3")
    with pytest.raises(ActorError, match="Actor call a.boom failed."):
        mesh.slice(gpus=0).boom.call_one(1).get()
    assert mesh.slice(gpus=0).add.call_one(1, 2).get() == 3


def test_future_timeout(procs):
    mesh = procs.spawn("slowpoke", AsyncEcho)
    fut = mesh.slice(gpus=0).gated.call_one(1)
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.05)
    mesh.slice(gpus=0).open_gate.call_one().get(timeout=10)
    assert fut.get(timeout=10) == 1


def test_async_actor_and_concurrent_endpoint(procs):
    mesh = procs.spawn("async_echo", AsyncEcho)
    assert mesh.slice(gpus=1).add.call_one(2, b=3).get() == 5
    one = mesh.slice(gpus=0)
    slow = one.gated.call_one(1)
    fast = one.slow.call_one(2, 0.0)
    assert fast.get(timeout=10) == 2 and not slow.done()  # it waits for the gate
    one.open_gate.call_one().get(timeout=10)
    assert slow.get(timeout=10) == 1
    assert one.order.call_one().get() == [1, 2]


def test_mixed_sync_async_is_a_value_error(procs):
    with pytest.raises(ValueError) as info:
        procs.spawn("mixed", Mixed)
    assert str(info.value) == (
        f"{Mixed} mixes both async and sync endpoints.Synchronous endpoints cannot be mixed "
        "with async endpoints because they can cause the asyncio loop to deadlock if they "
        "wait.sync: ['a'] async: ['b']")


def test_await_from_a_running_loop(procs):
    mesh = procs.spawn("awaited", Echo)

    async def main() -> tuple[int, list[int]]:
        one = await mesh.slice(gpus=0).add.call_one(1, 1)
        many = await mesh.add.call(2, 2)
        # .get() also works while a loop runs in this thread (Jupyter does this); while the
        # reply is pending it warns, as Monarch's does (tests/unit/test_future.py pins that:
        # here the reply may already be in when get() starts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            again = mesh.slice(gpus=1).add.call_one(5).get()
        return one + again, list(many.values())

    assert asyncio.run(main()) == (7, [4, 4, 4, 4])


def test_explicit_response_port_and_as_endpoint(procs):
    mesh = procs.spawn("ports", Echo)
    assert mesh.slice(gpus=0).twice.call_one(21).get() == 42
    assert as_endpoint(mesh.slice(gpus=0).plain).call_one(1).get() == 101
    with pytest.raises(AttributeError, match=r"ports \(test_actors.Echo\) has no endpoint "
                                             r"'nope'; its endpoints: .*twice"):
        mesh.nope  # noqa: B018


def test_channel_port_send_and_accumulator(procs):
    mesh = procs.spawn("callers", Caller)
    port, receiver = Channel.open()
    mesh.send_to.broadcast(port, 10)
    assert sorted(receiver.recv().get(timeout=10) for _ in range(4)) == [10, 11, 12, 13]
    echo = procs.spawn("acc", Echo)
    total = Accumulator(echo.add, 0, lambda acc, v: acc + v).accumulate(1, 2).get()
    assert total == 12
    port2, receiver2 = Channel.open()
    send(echo.add, (5,), {"b": 1}, port=port2)
    assert [receiver2.recv().get(timeout=10) for _ in range(4)] == [6, 6, 6, 6]


def test_a_once_channel_takes_one_value(procs):
    """`Channel.open(once=True)` is a one-shot port: its first value arrives, the others are
    dropped (the port is closed), while a plain channel keeps every value."""
    mesh = procs.spawn("once_callers", Caller)
    port, receiver = Channel.open(once=True)
    mesh.send_to.broadcast(port, 10)  # four senders
    assert receiver.recv().get(timeout=10) in (10, 11, 12, 13)
    plain, plain_receiver = Channel.open()
    mesh.send_to.broadcast(plain, 20)  # after the others, on the same links
    assert sorted(plain_receiver.recv().get(timeout=10) for _ in range(4)) == [20, 21, 22, 23]
    late = receiver.recv()
    with pytest.raises(TimeoutError):
        late.get(timeout=0.5)  # nothing more reached the one-shot port
    with pytest.raises(TypeError, match="once must be a bool"):
        Channel.open(once="yes")  # type: ignore[arg-type]


def test_meshes_and_ports_pass_to_other_actors(procs):
    callers = procs.spawn("passer", Caller)
    targets = procs.spawn("target", Echo)
    restored = pickle.loads(pickle.dumps(targets))
    assert restored.add.call(1).get().item(gpus=0) == 1
    result = callers.slice(gpus=0).call_other.call_one(targets.slice(gpus=slice(1, 3)), 5).get()
    assert result == [6, 6]


def test_slicing_geometry(procs2x2):
    mesh = procs2x2.spawn("geo", Echo)
    assert mesh.extent.labels == ["hosts", "gpus"] and mesh.sizes == {"hosts": 2, "gpus": 2}
    assert mesh.size() == 4 and len(mesh) == 4 and mesh.size("gpus") == 2
    row = mesh.slice(hosts=1)
    assert row.sizes == {"gpus": 2}
    assert [v["rank"] for v in row.whoami.call().get().values()] == [2, 3]
    flat = mesh.flatten("r")
    assert flat.sizes == {"r": 4}
    assert [v["point"] for v in flat.whoami.call().get().values()] == [
        {"r": 0}, {"r": 1}, {"r": 2}, {"r": 3}]
    assert mesh.rename(gpus="g").sizes == {"hosts": 2, "g": 2}
    assert mesh.flatten("r").split(r=("a", "b"), b=2).sizes == {"a": 2, "b": 2}
    with pytest.raises(TypeError, match="Shape does not have dimension labeled 'foo'"):
        mesh.slice(foo=1)
    with pytest.raises(IndexError, match="index out of range"):
        mesh.slice(gpus=2)
    assert repr(mesh) == "ActorMesh(class=<class 'test_actors.Echo'>, shape={hosts=2,gpus=2})"


def test_get_or_spawn_controller_is_a_singleton(procs):
    first = get_or_spawn_controller("counter", Counter, 10).get()
    second = get_or_spawn_controller("counter", Counter, 99).get()
    assert first.incr.call_one().get() == 11
    assert second.incr.call_one().get() == 12


def test_this_proc_hosts_actors_in_the_controller(procs):
    mesh = this_proc().spawn("local", Echo)
    assert mesh.add.call_one(1, 1).get() == 2
    assert len(mesh) == 1 and mesh.pid.call_one().get() == os.getpid()
    elsewhere = procs.spawn("not_local", Echo).pid.call().get(timeout=30).values()
    assert os.getpid() not in elsewhere and len(set(elsewhere)) == 4


def test_stop_then_calls_fail(procs):
    from monarch.actor import SupervisionError

    mesh = procs.spawn("stoppable", Echo)
    mesh.stop().get(timeout=20)
    with pytest.raises(SupervisionError, match=r"Endpoint call stoppable.add\(\) failed"):
        mesh.slice(gpus=0).add.call_one(1).get(timeout=20)


_finalized_at_exit = None  # set in a proc by Finalized: a module global with a __del__


class _WritesOnDel:
    def __init__(self, path: str) -> None:
        self._file = open(path, "w")  # `open` is gone by the time finalizers run

    def __del__(self) -> None:
        self._file.write("finalized")
        self._file.close()


class Finalized(Actor):
    def __init__(self, path: str) -> None:
        import torch  # noqa: F401 - with it, the actor's thread outlived the proc's teardown

        global _finalized_at_exit
        _finalized_at_exit = _WritesOnDel(path)

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def test_module_globals_are_finalized_when_the_proc_stops(tmp_path):
    """As in Monarch, a stopped proc ends like a Python program: the `__del__` of its module
    globals runs. The proc waits for its actors' threads first (a daemon thread still running
    an actor at exit kept its module alive through the teardown: no `__del__`)."""
    from waiting import wait_gone

    path = tmp_path / "marker.txt"
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    pid = procs.spawn("finalized", Finalized, str(path)).pid.call_one().get(timeout=120)
    procs.stop().get(timeout=60)
    wait_gone(pid)
    assert path.read_text() == "finalized"


def _slow_stop_thread_end(frame, event, arg) -> None:
    """A profile hook: the proc's stop thread, about to return (its frame still holding the
    stopped actors), waits 1 s, so the proc's main thread reaches the interpreter's teardown
    first unless it waits for that thread."""
    import time

    if event == "return" and frame.f_code.co_name == "stop_all":
        with open(os.environ["DELAYED_MARKER"], "w") as f:
            f.write("delayed")
        time.sleep(1.0)


def _delay_the_stop_thread() -> None:
    import threading

    threading.setprofile(_slow_stop_thread_end)  # threads started from now on


def test_module_globals_are_finalized_when_the_stop_thread_ends_late(tmp_path, monkeypatch):
    """Seen once in a loaded run (Monarch's `test_del_runs_on_proc_mesh_stop`): the stop
    thread had scheduled the proc's end but not yet returned when the main thread reached the
    teardown; it held the stopped actors, so their module's globals were never finalized. The
    proc waits for that thread too."""
    from waiting import wait_gone

    path, delayed = tmp_path / "marker.txt", tmp_path / "delayed.txt"
    monkeypatch.setenv("DELAYED_MARKER", str(delayed))
    procs = this_host().spawn_procs(per_host={"gpus": 1}, bootstrap=_delay_the_stop_thread)
    pid = procs.spawn("finalized", Finalized, str(path)).pid.call_one().get(timeout=120)
    procs.stop().get(timeout=60)
    wait_gone(pid)
    assert delayed.read_text() == "delayed"  # the hook found the stop thread
    assert path.read_text() == "finalized"


class Sleeper(Actor):
    @endpoint
    def busy_until(self, started: Port, flag: str) -> str:
        """Says it started, then blocks its thread until the file `flag` exists (60 s at most)."""
        from pathlib import Path

        started.send("started")
        try:
            wait_until(Path(flag).exists, "the flag", 60, interval=0.01)
        except AssertionError:
            return "gave up"
        return "released"


def test_a_busy_sync_actor_does_not_stall_its_proc(procs, tmp_path):
    """Another actor in the same proc answers, and casts rooted there are forwarded, while one
    actor of that proc runs a long handler."""
    sleepers = procs.spawn("sleepers", Sleeper)
    echoes = procs.spawn("neighbours", Echo)
    port, receiver = Channel.open()
    flag = tmp_path / "release"
    busy = sleepers.slice(gpus=0).busy_until.call_one(port, str(flag))
    assert receiver.recv().get(timeout=30) == "started"
    assert echoes.slice(gpus=0).add.call_one(1, 1).get(timeout=30) == 2
    assert list(echoes.add.call(2, 2).get(timeout=30).values()) == [4, 4, 4, 4]
    assert not busy.done()  # still blocked: the answers did not wait for it
    flag.touch()
    assert busy.get(timeout=30) == "released"


def test_a_proc_whose_only_actor_is_busy_still_serves_its_inbox(tmp_path):
    """An idle proc's I/O thread sleeps; when the proc's only actor then runs a long handler,
    the parked baton wakes it and it serves the inbox: a spawn there, and casts rooted there."""
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        sleepers = procs.spawn("lonely", Sleeper)
        wait_until(lambda: all(s["io_asleep"] for s in procs.stats().get(timeout=30).values()),
                   "the idle procs' I/O threads asleep")
        port, receiver = Channel.open()
        flag = tmp_path / "release"
        busy = sleepers.slice(gpus=0).busy_until.call_one(port, str(flag))
        assert receiver.recv().get(timeout=30) == "started"
        late = procs.spawn("late", Echo)  # proc 0 reads the spawn while its only actor is busy
        assert list(late.add.call(2, 2).get(timeout=30).values()) == [4, 4]
        assert not busy.done()
        flag.touch()
        assert busy.get(timeout=30) == "released"
    finally:
        procs.stop().get(timeout=30)


def test_tcp_transport_for_local_procs():
    from monarch.actor import ChannelTransport, enable_transport
    from monarch.config import configured

    with configured():
        enable_transport(ChannelTransport.TcpWithLocalhost)
        procs = this_host().spawn_procs(per_host={"gpus": 2})
    assert all(a.startswith("tcp://127.0.0.1:") for a in procs._table)
    mesh = procs.spawn("over_tcp", Echo)
    assert list(mesh.add.call(1, 2).get(timeout=20).values()) == [3, 3]
    procs.stop().get(timeout=20)
    with pytest.raises(ValueError, match="not available"):
        enable_transport("quic")


def test_a_failed_call_is_an_error_span(procs):

    from monarch._controller._job import current_job

    mesh = procs.spawn("span_outcome", Echo)
    with pytest.raises(ActorError):
        mesh.slice(gpus=0).boom.call_one(1).get()
    mesh.slice(gpus=0).add.call_one(1).get()
    store = current_job().store

    def spans() -> dict[str, str]:
        return {s.name: s.outcome for s in store.spans(limit=5000)
                if s.name.startswith("call span_outcome.")}

    wait_until(lambda: len(spans()) == 2, "both call spans in the store")
    assert spans() == {"call span_outcome.boom": "error", "call span_outcome.add": "ok"}


class Colliding(Actor):
    @endpoint
    def stop(self) -> None:
        pass


def test_an_endpoint_named_like_a_mesh_attribute_is_refused_at_spawn(procs):
    with pytest.raises(ValueError, match="ActorMesh has an attribute that collides with an "
                                         "endpoint name: attribute=stop"):
        procs.spawn("colliding", Colliding)


class SyncPinger(Actor):
    @endpoint
    def ping(self) -> str:
        return "pong"


class AsyncPinger(Actor):
    @endpoint
    async def ping(self) -> str:
        return "pong"


@pytest.mark.parametrize("cls", [SyncPinger, AsyncPinger])
def test_an_internal_error_in_an_actors_thread_fails_it_and_answers_every_caller(cls, fault_log):
    """Fault injection: the runtime's own code raises in the actor's thread (not a handler's
    error). The actor fails with the traceback, the call it had taken and every later one get
    the failure: nobody is left waiting on a thread that ended (the soak saw a controller's
    actor thread end silently, and a caller time out 60 s later)."""
    from monarch._runtime import _process_runtime as process

    mesh = this_proc().spawn(f"internal_{cls.__name__}", cls)
    assert mesh.ping.call_one().get(timeout=30) == "pong"
    slot = process.current().actors[mesh._mesh_id]

    def broken(*args: object) -> None:
        raise RuntimeError("a fault of the runtime (injected)")

    slot.begin = broken
    with pytest.raises(SupervisionError, match="internal error of the monarch runtime"):
        mesh.ping.call_one().get(timeout=30)
    with pytest.raises(SupervisionError, match="a fault of the runtime"):
        mesh.ping.call_one().get(timeout=30)
    wait_until(lambda: not slot.thread.is_alive(), "the actor's thread to end", 30)


def test_an_error_in_the_loop_leaves_the_actor_leading_it_running():
    """Fault injection: the loop's own code raises while an idle actor's thread leads it (an
    idle sync actor's thread runs the process's loop). The error is reported and counted;
    that actor and the loop go on (the soak saw the weights index's thread end this way)."""
    import threading

    from monarch._runtime import _process_runtime as process

    mesh = this_proc().spawn("loop_fault", SyncPinger)  # idle: it, or another, leads
    assert mesh.ping.call_one().get(timeout=30) == "pong"
    runtime = process.current()
    errors_before = runtime.internal_errors
    run_timers = runtime._run_timers
    hit: list[threading.Thread] = []

    def flaky() -> None:
        if not hit and threading.current_thread().name.startswith("actor-"):
            hit.append(threading.current_thread())
            raise RuntimeError("a fault of the loop (injected)")
        run_timers()

    def tick() -> None:  # a timer due every 20 ms, whoever leads
        if not hit:
            runtime.call_later(0.02, tick)

    runtime._run_timers = flaky
    try:
        runtime.call_later(0.02, tick)
        wait_until(lambda: hit, "an actor's thread to lead the loop and meet the fault", 30)
        slot = next(s for s in list(runtime.actors.values())
                    if getattr(s, "thread", None) is hit[0])
        assert mesh.ping.call_one().get(timeout=30) == "pong"
        assert hit[0].is_alive() and slot.state == "running"
        assert runtime.internal_errors == errors_before + 1
    finally:
        del runtime._run_timers
        mesh.stop().get(timeout=30)


class Speaker(Actor):
    @endpoint
    def say(self, text: str) -> None:
        print(text, flush=True)


def test_an_idle_proc_looks_at_its_telemetry_seldom_and_still_ships_a_line_at_once():
    """An idle proc's telemetry looks space out to `IDLE_TICK_S` (64 idle procs took ~27 % of
    a core looking 10 times a second); a line printed then still reaches the store."""
    import os

    from monarch._controller._job import current_job
    from monarch._runtime._instrument import IDLE_TICK_S

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        speaker = procs.spawn("speaker", Speaker)
        speaker.say.call_one("warm").get(timeout=30)
        wait_until(lambda: all(s["telemetry_look_s"] == IDLE_TICK_S
                               for s in procs.stats().get(timeout=30).values()),
                   "the idle proc's looks spaced out", 30)
        token = f"idle-line {os.urandom(4).hex()}"
        speaker.say.broadcast(token)
        wait_until(lambda: current_job().store.logs(text=token, limit=10), "the line", 30)
    finally:
        procs.stop().get(timeout=30)
