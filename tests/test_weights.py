"""monarch.weights between real processes: values equal after a get, old versions released."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
import torch

from monarch.actor import Actor, endpoint, this_host
from monarch.weights import (VersionReleasedError, delete_state_dict, get_state_dict,
                             latest_version, put_state_dict)

pytestmark = pytest.mark.timeout(120)

TIMEOUT = 60


def model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))


class Trainer(Actor):
    def __init__(self) -> None:
        self.model = model(1)

    @endpoint
    async def publish(self, key: str, scale: float) -> int:
        self.model.load_state_dict(expected(scale))
        sd = dict(self.model.state_dict(), step=int(scale * 10))
        version = await put_state_dict(sd, key)
        with torch.no_grad():  # changing the tensors after the put leaves the version as it was
            for p in self.model.parameters():
                p.zero_()
        return version

    @endpoint
    async def pid(self) -> int:
        return os.getpid()

    @endpoint
    async def manifest(self, key: str) -> Any:
        from monarch.weights import _index

        index = await _index()
        return await index.fetch.call_one(key)


class Generator(Actor):
    def __init__(self) -> None:
        self.model = model(2)

    @endpoint
    async def pull(self, key: str) -> tuple[int, dict[str, Any], Any]:
        sd = await get_state_dict(key, into=self.model.state_dict())
        return sd.version, {k: v.clone() for k, v in self.model.state_dict().items()}, \
            sd["step"]


@pytest.fixture(scope="module")
def meshes(fault_log: Any) -> Any:
    procs = this_host().spawn_procs(per_host={"gpus": 3})
    trainer = procs.slice(gpus=0).spawn("w_trainer", Trainer)
    generators = procs.slice(gpus=slice(1, 3)).spawn("w_generators", Generator)
    yield trainer, generators
    procs.stop().get(timeout=30)


def expected(scale: float) -> dict[str, torch.Tensor]:
    reference = model(1)
    with torch.no_grad():
        for p in reference.parameters():
            p.mul_(scale)
    return reference.state_dict()


def test_generators_get_the_trainers_values(meshes):
    trainer, generators = meshes
    version = trainer.publish.call_one("policy", 2.0).get(timeout=TIMEOUT)
    for _, (got, state, step) in generators.pull.call("policy").get(timeout=TIMEOUT).items():
        assert got == version and step == 20
        for name, tensor in expected(2.0).items():
            assert torch.equal(state[name], tensor), name
    assert latest_version("policy").get(timeout=TIMEOUT) == version


def test_the_controller_reads_into_new_tensors_and_checks_into(meshes):
    trainer, _ = meshes
    version = trainer.publish.call_one("ctl", 1.0).get(timeout=TIMEOUT)
    sd = get_state_dict("ctl").get(timeout=TIMEOUT)
    assert sd.version == version
    assert all(torch.equal(sd[k], v) for k, v in expected(1.0).items())
    wrong = {"0.weight": torch.zeros(3, 3)}
    with pytest.raises(ValueError, match="0.weight"):
        get_state_dict("ctl", into=wrong).get(timeout=TIMEOUT)
    with pytest.raises(KeyError):
        get_state_dict("never-put").get(timeout=TIMEOUT)


def test_old_versions_are_released(meshes):
    from monarch.rdma import BufferDroppedError

    trainer, generators = meshes
    first = trainer.publish.call_one("rel", 1.0).get(timeout=TIMEOUT)
    _, entries = trainer.manifest.call_one("rel").get(timeout=TIMEOUT)
    buffers = [e[4] for e in entries.values() if e[0] == "tensor"]
    second = trainer.publish.call_one("rel", 3.0).get(timeout=TIMEOUT)
    assert second == first + 1
    with pytest.raises(VersionReleasedError):
        get_state_dict("rel", version=first).get(timeout=TIMEOUT)
    for buffer in buffers:  # the first version's memory is gone from the trainer
        with pytest.raises(BufferDroppedError):
            buffer.read_into(torch.empty(buffer.size(), dtype=torch.uint8)).get(timeout=TIMEOUT)
    assert {v for _, (v, _, _) in generators.pull.call("rel").get(timeout=TIMEOUT).items()} \
        == {second}
    assert delete_state_dict("rel").get(timeout=TIMEOUT)
    assert latest_version("rel").get(timeout=TIMEOUT) is None


def test_a_delete_answers_once_the_owner_let_the_memory_go(meshes):
    """Releasing a version (a delete, a newer publish) answers only once the buffers' owner
    dropped them: while the owner is stopped (SIGSTOP) the delete does not answer; continued,
    it answers and the buffers refuse reads at once. (The drops were sent and not waited for:
    the answer came while the owner still held the memory.)"""
    from monarch.rdma import BufferDroppedError

    trainer, _ = meshes
    trainer.publish.call_one("held", 2.0).get(timeout=TIMEOUT)
    _, entries = trainer.manifest.call_one("held").get(timeout=TIMEOUT)
    buffers = [e[4] for e in entries.values() if e[0] == "tensor"]
    pid = trainer.pid.call_one().get(timeout=TIMEOUT)
    os.kill(pid, signal.SIGSTOP)
    try:
        deleted = delete_state_dict("held")
        with pytest.raises(TimeoutError):  # the owner cannot answer its drops yet
            deleted.get(timeout=2.0)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert deleted.get(timeout=TIMEOUT) is True
    for buffer in buffers:
        with pytest.raises(BufferDroppedError):
            buffer.read_into(torch.empty(buffer.size(), dtype=torch.uint8)).get(timeout=TIMEOUT)


def test_weight_versions_show_in_the_topology_and_monarch_status(meshes):
    """Versions were nowhere but in the code: now in the metrics (SQL, Prometheus), the
    admin topology and `monarch status`."""
    from waiting import wait_until

    from monarch._controller._job import current_job
    from monarch.admin import AdminClient
    from monarch.cli._status import render_status

    trainer, generators = meshes
    version = trainer.publish.call_one("shown", 3.0).get(timeout=TIMEOUT)
    generators.pull.call("shown").get(timeout=TIMEOUT)
    job = current_job()
    admin = AdminClient(job.admin.address, job.admin.token)
    nbytes = sum(t.numel() * t.element_size() for t in expected(3.0).values())

    def shown() -> dict | None:
        entries = [w for w in admin.topology()["weights"] if w["key"] == "shown"]
        return entries[0] if entries and entries[0]["reads"] >= 2 else None

    entry = wait_until(shown, "the weight version in the topology")
    assert (entry["version"], entry["bytes"]) == (version, nbytes)
    lines = render_status(admin.job(), admin.topology())
    assert any(line.startswith("weights shown: v") and f"v{version}," in line for line in lines)
