"""HostMesh: how procs start (bootstrap commands, interpreters, CPU pinning) and who may stop
or shut down the hosts (the owned mesh, not a slice or a copy)."""

from __future__ import annotations

import asyncio
import os
import pickle
import sys
from pathlib import Path
from types import MappingProxyType

import pytest
from waiting import alive, wait_gone, wait_until

from monarch.actor import (Actor, ActorError, BootstrapCommand, SupervisionError,
                           default_bootstrap_cmd, endpoint, this_host)
from monarch.job import ProcessJob

pytestmark = pytest.mark.timeout(180)


class Forked(Actor):
    @endpoint
    def parent_environ(self) -> dict:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            pairs = [item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item]
        return {k.decode(): v.decode(errors="replace") for k, v in pairs}


class Probe(Actor):
    @endpoint
    def env(self, name: str) -> str | None:
        return os.environ.get(name)

    @endpoint
    def environ(self) -> dict:
        return dict(os.environ)

    @endpoint
    def pid(self) -> int:
        return os.getpid()

    @endpoint
    def affinity(self) -> list[int]:
        return sorted(os.sched_getaffinity(0))

    @endpoint
    def spawn_inner(self) -> "Probe":
        return this_host().spawn_procs().spawn("inner", Probe)


def gated_bootstrap(entered: str, release: str, failure: str | None) -> None:
    """A proc mesh's bootstrap that waits (30 s at most) for the test to open the gate."""
    Path(entered).touch()
    wait_until(Path(release).exists, "the test to open the gate", 30, interval=0.01)
    os.environ["BOOTSTRAPPED"] = "yes"
    if failure:
        raise RuntimeError(failure)


async def async_bootstrap() -> None:
    await asyncio.sleep(0)
    os.environ["BOOTSTRAPPED"] = "async"


def test_initialized_waits_for_the_bootstrap(fault_log, tmp_path):
    entered, release = tmp_path / "entered", tmp_path / "release"
    job = ProcessJob({"hosts": 1})
    try:
        hosts = job.state(cached_path=None).hosts
        procs = hosts.spawn_procs(per_host={"gpus": 2}, bootstrap=lambda: gated_bootstrap(
            str(entered), str(release), None))  # returns before the bootstrap ran
        wait_until(entered.exists, "the bootstrap to start")
        probe = procs.spawn("after_bootstrap", Probe)  # held until the bootstrap returned
        ready, actor_ready = procs.initialized, probe.initialized
        with pytest.raises(TimeoutError):
            ready.get(timeout=0.3)
        with pytest.raises(TimeoutError):
            actor_ready.get(timeout=0.3)
        release.touch()
        assert ready.get(timeout=60) is True and procs.initialized.get(timeout=60) is True
        assert actor_ready.get(timeout=60) is None
        assert set(probe.env.call("BOOTSTRAPPED").get(timeout=60).values()) == {"yes"}
        local = this_host().spawn_procs(bootstrap=async_bootstrap)
        assert asyncio.run(_awaited(local.initialized)) is True
        assert local.spawn("a", Probe).env.call_one("BOOTSTRAPPED").get(timeout=60) == "async"
    finally:
        job.kill()


async def _awaited(future):
    return await future


def test_a_failed_bootstrap_fails_initialized_every_time_not_supervision(fault_log, tmp_path):
    procs = this_host().spawn_procs(per_host={"gpus": 2}, name="badboot",
                                    bootstrap=lambda: gated_bootstrap(
                                        str(tmp_path / "e"), str(tmp_path / "e"), "no GPU here"))
    probe = procs.spawn("never", Probe)
    errors = []
    for _ in range(2):  # settled once, replayed to every observer
        with pytest.raises(ActorError) as caught:
            procs.initialized.get(timeout=60)
        errors.append(str(caught.value))
    assert errors[0] == errors[1] and "no GPU here" in errors[0] and "badboot" in errors[0]
    with pytest.raises(SupervisionError, match="bootstrap of proc badboot-.* failed: "
                                               "RuntimeError: no GPU here"):
        probe.pid.call().get(timeout=60)
    assert not [f for f in fault_log.failures if "badboot" in f.report()]


def test_bootstrap_command_values():
    cmd = BootstrapCommand("/bin/true", None, [], {"A": "1"}, inherit_env=False)
    derived = cmd.with_env({"B": "2", "A": None})
    assert not derived.inherit_env and derived.env == {"A": None, "B": "2"}
    assert cmd.env == {"A": "1"}  # with_env makes a copy
    assert derived.with_env({"A": "3"}).env == {"A": "3", "B": "2"}
    assert BootstrapCommand("/bin/true", None, [], MappingProxyType({"X": None})).inherit_env
    assert pickle.loads(pickle.dumps(derived)) == derived
    cmd.env = MappingProxyType({"C": "1"})
    assert cmd.env == {"C": "1"}
    with pytest.raises(TypeError, match="env must map str to str or None"):
        BootstrapCommand("/bin/true", None, [], {"A": 1})
    with pytest.raises(TypeError, match="args must be a list of str"):
        BootstrapCommand("/bin/true", None, "-c", {})
    default = default_bootstrap_cmd()
    assert default.program == sys.executable and default.env == {} and default.inherit_env


def test_procs_start_with_the_command_environment(fault_log, monkeypatch):
    monkeypatch.setenv("MONARCH_TEST_KEPT", "kept")
    monkeypatch.setenv("MONARCH_TEST_REMOVED", "there")
    cmd = default_bootstrap_cmd().with_env({"MONARCH_TEST_REMOVED": None,
                                            "MONARCH_TEST_SET": "set"})
    procs = this_host().spawn_procs(per_host={"procs": 1}, bootstrap_command=cmd)
    probe = procs.spawn("env_probe", Probe)
    env = probe.environ.call_one().get(timeout=60)
    assert env.get("MONARCH_TEST_KEPT") == "kept"
    assert "MONARCH_TEST_REMOVED" not in env and env.get("MONARCH_TEST_SET") == "set"
    bare = default_bootstrap_cmd().with_env({"PATH": os.environ["PATH"], "ONLY": "this"})
    bare.inherit_env = False
    empty = this_host().spawn_procs(bootstrap_command=bare).spawn("bare", Probe)
    env = empty.environ.call_one().get(timeout=60)
    assert env.get("ONLY") == "this" and "MONARCH_TEST_KEPT" not in env
    procs.stop().get(timeout=30)


def test_a_command_per_point(fault_log):
    def per_rank(point):
        return default_bootstrap_cmd().with_env({"CUDA_VISIBLE_DEVICES": str(point["gpus"])})

    procs = this_host().spawn_procs(per_host={"gpus": 2}, bootstrap_command=per_rank)
    seen = procs.spawn("cuda", Probe).env.call("CUDA_VISIBLE_DEVICES").get(timeout=60)
    assert sorted(seen.values()) == ["0", "1"]
    with pytest.raises(TypeError, match="not a BootstrapCommand"):
        this_host().spawn_procs(bootstrap_command=lambda point: "python")
    with pytest.raises(TypeError, match="bootstrap_command must be a BootstrapCommand"):
        this_host().spawn_procs(bootstrap_command="python -m monarch._proc_boot")
    procs.stop().get(timeout=30)


def test_a_command_that_cannot_start_fails_the_proc_not_the_caller(fault_log):
    bad = BootstrapCommand("/nonexistent/python", None, [], {})
    procs = this_host().spawn_procs(bootstrap_command=bad, name="unstartable")
    failure = fault_log.wait_for(lambda f: "unstartable" in f.report(), timeout=60)
    assert "exit code 127" in failure.report() or "127" in failure.report()
    with pytest.raises(SupervisionError):
        procs.spawn("never", Probe).pid.call_one().get(timeout=60)


def test_with_python_executable_runs_the_wrapper_for_every_proc(fault_log, tmp_path):
    wrapper = tmp_path / "python-wrapper"
    wrapper.write_text(f"#!/bin/sh\nexport WRAPPER_PID=$$\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    probe = this_host().with_python_executable(str(wrapper)).spawn_procs().spawn("w", Probe)
    direct = probe.env.call_one("WRAPPER_PID").get(timeout=60)
    assert direct == str(probe.pid.call_one().get(timeout=30))  # exec'd: the same pid
    inner = probe.spawn_inner.call_one().get(timeout=60)  # this_host() in the proc keeps it
    again = inner.env.call_one("WRAPPER_PID").get(timeout=60)
    assert again and again != direct


def test_proc_bind_pins_cpus(fault_log):
    cpus = sorted(os.sched_getaffinity(0))
    first, last = cpus[0], cpus[-1]
    procs = this_host().spawn_procs(per_host={"gpus": 2},
                                    proc_bind=[{"cpus": str(first)}, {"physcpubind": str(last)}])
    seen = procs.spawn("pinned", Probe).affinity.call().get(timeout=60)
    assert sorted(tuple(v) for v in seen.values()) == sorted([(first,), (last,)])
    with pytest.raises(ValueError, match=r"proc_bind length \(1\) must equal procs_per_host "
                                         r"\(2\)"):
        this_host().spawn_procs(per_host={"gpus": 2}, proc_bind=[{"cpus": "0"}])
    with pytest.raises(ValueError, match="unknown key 'gpus'"):
        this_host().spawn_procs(proc_bind=[{"gpus": "0"}])
    with pytest.raises(ValueError, match="not a CPU or node list"):
        this_host().spawn_procs(proc_bind=[{"cpus": "zero"}])
    procs.stop().get(timeout=30)


def test_stop_ends_only_the_procs_spawned_through_that_mesh(fault_log):
    job = ProcessJob({"hosts": 2})
    try:
        first = job.state(cached_path=None).hosts
        second = job.state(cached_path=None).hosts
        mine = list(first.spawn_procs(per_host={"gpus": 1}).spawn("a", Probe).pid.call().get(
            timeout=60).values())
        theirs = second.spawn_procs(per_host={"gpus": 1}).spawn("b", Probe)
        others = list(theirs.pid.call().get(timeout=60).values())
        from_slice = list(first.slice(hosts=1).spawn_procs().spawn("c", Probe).pid.call().get(
            timeout=60).values())
        assert first.stop().get(timeout=60) is None
        assert not [p for p in mine + from_slice if alive(p)]  # settled after they exited
        assert all(alive(p) for p in others)
        assert sorted(theirs.pid.call().get(timeout=60).values()) == sorted(others)
        # stopped, not shut down: the mesh spawns again
        again = first.spawn_procs().spawn("d", Probe).pid.call().get(timeout=60)
        assert len(again) == 2
        assert second.shutdown().get(timeout=60) is None
        wait_gone(*others)
    finally:
        job.kill()


def test_only_the_owned_mesh_shuts_down_and_only_once(fault_log):
    job = ProcessJob({"hosts": 2})
    try:
        hosts = job.state(cached_path=None).hosts
        with pytest.raises(RuntimeError, match="^cannot shut down `HostMesh` that is a "
                                               "reference instead of owned$"):
            hosts.slice(hosts=1).shutdown().get(timeout=30)
        with pytest.raises(RuntimeError, match="^cannot stop `HostMesh` that is a reference"):
            hosts.slice(hosts=1).stop().get(timeout=30)
        with pytest.raises(RuntimeError, match="reference instead of owned"):
            pickle.loads(pickle.dumps(hosts)).shutdown().get(timeout=30)

        async def scoped() -> list[int]:
            async with hosts as hm:
                probe = hm.spawn_procs(per_host={"gpus": 2}).spawn("scoped", Probe)
                return list((await probe.pid.call()).values())

        pids = asyncio.run(scoped())
        wait_gone(*pids)
        with pytest.raises(RuntimeError, match="HostMesh has already been shut down"):
            hosts.spawn_procs()
        with pytest.raises(RuntimeError, match="HostMesh has already been shut down"):
            hosts.shutdown().get(timeout=30)
    finally:
        job.kill()


def test_procs_keep_freed_heap_memory_unless_the_environment_says_otherwise(fault_log):
    from monarch._host._agent import MALLOC_DEFAULTS, proc_environment

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    try:
        # glibc reads them when a process starts: the zygote's, which every proc is forked from
        zygote = procs.spawn("malloc", Forked).parent_environ.call_one().get(timeout=60)
        for key, value in MALLOC_DEFAULTS.items():
            assert zygote.get(key) == os.environ.get(key, value)
    finally:
        procs.stop().get(timeout=60)
    mine = proc_environment({"MALLOC_ARENA_MAX": "4", "PATH": "/bin"})
    assert mine["MALLOC_ARENA_MAX"] == "4" and mine["PATH"] == "/bin"
    assert mine["MALLOC_TRIM_THRESHOLD_"] == MALLOC_DEFAULTS["MALLOC_TRIM_THRESHOLD_"]


def test_the_root_lists_the_proc_meshes_it_spawned_until_they_stop():
    """Monarch's `stop_all_proc_meshes` fixture stops what a test left running through the
    root's `_children`; `_stopped` is a property, as Monarch's (a method is always truthy)."""
    from monarch.actor import context

    root = context().actor_instance
    procs = this_host().spawn_procs(per_host={"gpus": 1})
    assert procs in root._children and procs._stopped is False
    procs.stop().get(timeout=60)
    assert procs._stopped is True
    later = this_host().spawn_procs(per_host={"gpus": 1})
    assert later in root._children and procs not in root._children  # the stopped one went
    later.stop().get(timeout=60)
