"""monarch.service with real replica processes: routing, fanout, failures, replacement."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from monarch.actor import Actor, ActorError, SupervisionError, concurrent_endpoint, endpoint
from monarch.service import Service, ServiceUnavailableError, no_retry
from waiting import wait_gone, wait_until

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 60


class Replica(Actor):
    """An async replica; `hold` calls (concurrent) wait until `let_go` is called."""

    def __init__(self, tag: str = "") -> None:
        import asyncio

        self.tag = tag
        self.release = asyncio.Event()

    @endpoint
    async def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def whoami(self, x: int) -> tuple[str, int, int]:
        return self.tag, os.getpid(), x

    @concurrent_endpoint
    async def hold(self) -> int:
        await self.release.wait()
        return os.getpid()

    @no_retry
    @concurrent_endpoint
    async def hold_once(self) -> int:
        await self.release.wait()
        return os.getpid()

    @endpoint
    async def let_go(self) -> None:
        self.release.set()

    @endpoint
    async def boom(self) -> None:
        raise ValueError("boom")


class Caller(Actor):
    """Routes through a service handle it was given (the handle is plain data)."""

    @endpoint
    def through(self, svc: Any, x: int) -> int:
        return svc.whoami.route(x).get(timeout=TIMEOUT)[2]


class BrokenInit(Actor):
    """The first replica to start raises in `__init__`, the others start; each leaves its pid
    in `pid_dir`."""

    def __init__(self, pid_dir: str) -> None:
        Path(pid_dir, str(os.getpid())).touch()
        try:
            Path(pid_dir, "broken").touch(exist_ok=False)
        except FileExistsError:
            return
        raise RuntimeError("cannot start")

    @endpoint
    def pid(self) -> int:
        return os.getpid()


def start(cls: type, *args: Any, **options: Any) -> Service[Any]:
    return cls.options(**options).as_service(*args).get(timeout=TIMEOUT)


def healthy_generations(svc: Service[Any]) -> list[tuple[str, int]]:
    return [(r["state"], r["generation"]) for r in svc.replicas().get(timeout=TIMEOUT)]


@pytest.fixture
def admin(fault_log: Any) -> Any:
    from monarch.admin import AdminClient
    from monarch._controller._job import current_job

    job = current_job()
    assert job is not None and job.admin is not None
    return AdminClient(job.admin.address, job.admin.token)


@pytest.fixture
def service(fault_log: Any) -> Any:
    svc = start(Replica, "t", num_replicas=2)
    yield svc
    svc.shutdown().get(timeout=TIMEOUT)


def test_routes_spread_over_replicas_and_fanout_answers_once_per_replica(service):
    routed = [service.whoami.route(i).get(timeout=TIMEOUT) for i in range(6)]
    assert [x for _, _, x in routed] == list(range(6))
    assert len({pid for _, pid, _ in routed}) == 2
    answers = service.whoami.fanout(9).get(timeout=TIMEOUT)
    assert len(answers) == 2 and {a[1] for a in answers} == {pid for _, pid, _ in routed}
    assert service.whoami.call_one(5).get(timeout=TIMEOUT)[2] == 5


def test_a_service_handle_works_in_another_actor(service):
    from monarch.actor import this_host

    procs = this_host().spawn_procs(per_host={"procs": 1})
    try:
        caller = procs.spawn("caller", Caller)
        assert caller.through.call_one(service, 41).get(timeout=TIMEOUT) == 41
    finally:
        procs.stop().get(timeout=TIMEOUT)


def test_a_session_sticks_to_one_replica(service):
    pids = {service.whoami.route(i, session="alice").get(timeout=TIMEOUT)[1] for i in range(5)}
    assert len(pids) == 1
    other = {service.whoami.route(i, session="bob").get(timeout=TIMEOUT)[1] for i in range(5)}
    assert len(other) == 1


def test_least_outstanding_avoids_the_busy_replica(service):
    held = service.hold.route()
    wait_until(lambda: outstanding(service) == [1, 0] or outstanding(service) == [0, 1],
               "the held call to be outstanding")
    busy = outstanding(service).index(1)
    pids = service.pid.fanout().get(timeout=TIMEOUT)
    assert {service.pid.route().get(timeout=TIMEOUT) for _ in range(4)} == {pids[1 - busy]}
    service.let_go.fanout().get(timeout=TIMEOUT)
    assert held.get(timeout=TIMEOUT) == pids[busy]


def outstanding(svc: Service[Any]) -> list[int]:
    return [r["outstanding"] for r in svc.replicas().get(timeout=TIMEOUT)]


def test_an_endpoint_error_reaches_the_caller_and_the_replica_stays(service):
    with pytest.raises(ActorError) as err:
        service.boom.route().get(timeout=TIMEOUT)
    assert isinstance(err.value.exception, ValueError)
    assert healthy_generations(service) == [("healthy", 0), ("healthy", 0)]
    with pytest.raises(AttributeError):
        service.nope


def test_a_killed_replica_costs_no_failed_route_and_is_replaced(service, admin):
    pids = service.pid.fanout().get(timeout=TIMEOUT)
    in_flight = [service.hold.route() for _ in range(4)]
    wait_until(lambda: outstanding(service) == [2, 2], "two calls in flight on each replica")
    os.kill(pids[0], signal.SIGKILL)
    # routes sent while the replica dies and is replaced all succeed
    during = [service.whoami.route(i).get(timeout=TIMEOUT)[2] for i in range(10)]
    assert during == list(range(10))
    wait_until(lambda: healthy_generations(service) == [("healthy", 1), ("healthy", 0)],
               "replica 0 replaced by a healthy generation 1", timeout=10)
    new_pids = service.pid.fanout().get(timeout=TIMEOUT)
    assert new_pids[0] != pids[0] and new_pids[1] == pids[1]
    # the calls held on the dead replica were retried on the survivor (or its replacement)
    service.let_go.fanout().get(timeout=TIMEOUT)
    answered = {f.get(timeout=TIMEOUT) for f in in_flight}
    assert answered <= set(new_pids) and pids[1] in answered
    wait_gone(pids[0])
    topology = wait_until(lambda: _service_in(admin.topology(), service.name, retried=2),
                          "the admin topology to show the replaced replica")
    replicas = [(r["replica"], r["generation"], r["state"]) for r in topology["replicas"]]
    assert replicas == [(0, 1, "healthy"), (1, 0, "healthy")]
    assert [(r["replica"], r["state"]) for r in topology["replaced"]] == [(0, "failed")]


def _service_in(topology: dict[str, Any], name: str, retried: int) -> dict[str, Any] | None:
    found = [s for s in topology.get("services", [])
             if s["name"] == name and s["state"] != "stopped"]
    if found and found[-1]["retried"] >= retried and found[-1]["healthy"] == 2:
        return found[-1]
    return None


def test_a_no_retry_endpoint_gets_the_failure(service):
    pids = service.pid.fanout().get(timeout=TIMEOUT)
    held = [service.hold_once.route() for _ in range(2)]
    wait_until(lambda: outstanding(service) == [1, 1], "one call in flight on each replica")
    os.kill(pids[1], signal.SIGKILL)
    wait_until(lambda: healthy_generations(service)[1] == ("healthy", 1),
               "replica 1 replaced", timeout=10)
    service.let_go.fanout().get(timeout=TIMEOUT)
    outcomes = [f.exception(timeout=TIMEOUT) for f in held]
    assert outcomes[0] is None and isinstance(outcomes[1], SupervisionError)


def test_shutdown_stops_every_replica(fault_log):
    svc = start(Replica, num_replicas=2, name="stopping")
    pids = svc.pid.fanout().get(timeout=TIMEOUT)
    svc.shutdown().get(timeout=TIMEOUT)
    wait_gone(*pids)
    with pytest.raises((ServiceUnavailableError, SupervisionError)):
        svc.pid.route().get(timeout=TIMEOUT)


def test_a_replica_that_cannot_start_fails_as_service_and_stops_them_all(fault_log, tmp_path):
    with pytest.raises(ActorError, match=r"service broken: replica [012] did not start: "
                                         r"RuntimeError: cannot start") as err:
        start(BrokenInit, str(tmp_path), num_replicas=3, name="broken")
    assert isinstance(err.value.exception, RuntimeError)
    pids = [int(p.name) for p in tmp_path.iterdir() if p.name.isdigit()]
    assert len(pids) == 3  # every replica ran __init__: one failed, two started
    wait_gone(*pids)  # and none keeps running


def test_options_are_checked():
    with pytest.raises(ValueError, match="num_replicas"):
        Replica.options(num_replicas=0)
    with pytest.raises(ValueError, match="procs"):
        Replica.options(procs=-1)
    with pytest.raises(TypeError):
        Replica.options(gpus=2)
    with pytest.raises(TypeError, match="no_retry"):
        no_retry(lambda self: None)


def test_replicas_of_several_procs_answer_a_value_mesh(fault_log):
    svc = start(Replica, "multi", procs=2, num_replicas=2)
    try:
        answer = svc.whoami.route(3).get(timeout=TIMEOUT)
        assert len(answer) == 2 and {v[2] for _, v in answer.items()} == {3}
        assert len(svc.whoami.fanout(1).get(timeout=TIMEOUT)) == 2
    finally:
        svc.shutdown().get(timeout=TIMEOUT)
