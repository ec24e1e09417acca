"""monarch.spmd on real processes: torchrun's environment per rank, scripts and modules run as
torchrun's children, DDP over gloo agreeing across ranks, and script failures reaching the caller.

The tests use their own 2x2 mesh ({"hosts": 2, "gpus": 2}): SPMD scripts change the procs'
environment and `sys.argv`, which the session's shared meshes must not see. Rendezvous addresses
are on loopback, ports free ones.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from importing import what_importing_does

from monarch._geometry._extent import Extent, Point
from monarch._mesh._spmd import Ranks
from monarch.actor import Actor, ActorError, SupervisionError, endpoint, this_host
from monarch.spmd import SPMDActor, setup_torch_elastic_env, setup_torch_elastic_env_async
from monarch.tools.network import AddrType, get_ipaddr

pytestmark = pytest.mark.timeout(120)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
ENV_KEYS = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
            "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "WORLD_SIZE")

# Writes what the script saw (its environment, argv, __name__) to OUT/rank{RANK}.json.
REPORT_SCRIPT = textwrap.dedent("""
    import json, os, sys
    keys = {keys!r}
    seen = {{"env": {{k: os.environ.get(k) for k in keys}}, "argv": sys.argv, "name": __name__}}
    with open(os.path.join(sys.argv[-1], f"rank{{os.environ['RANK']}}.json"), "w") as f:
        json.dump(seen, f)
""").format(keys=ENV_KEYS)


class EnvCapture(Actor):
    @endpoint
    def env(self) -> dict[str, str | None]:
        return {key: os.environ.get(key) for key in ENV_KEYS}

    @endpoint
    def add_sys_path(self, path: str) -> None:
        if path not in sys.path:
            sys.path.insert(0, path)


class AllReduce(Actor):
    """Client code calling torch.distributed itself after `setup_torch_elastic_env`."""

    @endpoint
    def sum_of_ranks(self) -> int:
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo")
        try:
            value = torch.tensor([dist.get_rank()])
            dist.all_reduce(value)
            return int(value.item())
        finally:
            dist.destroy_process_group()


@pytest.fixture(scope="module")
def mesh(fault_log: Any) -> Iterator[Any]:
    procs = this_host().spawn_procs(per_host={"hosts": 2, "gpus": 2})
    yield procs
    procs.stop().get(timeout=30)


def loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def expected_env(hosts: int, gpus: int, addr: str, port: int) -> dict[str, str]:
    rank = hosts * 2 + gpus
    return {"MASTER_ADDR": addr, "MASTER_PORT": str(port), "RANK": str(rank),
            "LOCAL_RANK": str(gpus), "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": str(hosts),
            "GROUP_WORLD_SIZE": "2", "ROLE_RANK": str(rank), "ROLE_WORLD_SIZE": "4",
            "ROLE_NAME": "rank", "WORLD_SIZE": "4"}


# Process-free: the ranks a point gets.

def test_ranks_of_a_point_use_the_last_dimension_as_local():
    ranks = Ranks.of(Point(5, Extent(["hosts", "gpus"], [2, 4])))
    assert (ranks.rank, ranks.local_rank, ranks.world_size, ranks.local_world_size,
            ranks.group_rank, ranks.group_world_size) == (5, 1, 8, 4, 1, 2)
    assert ranks.env("127.0.0.1", 29500) == {
        "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "RANK": "5", "LOCAL_RANK": "1",
        "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "1", "GROUP_WORLD_SIZE": "2", "ROLE_RANK": "5",
        "ROLE_WORLD_SIZE": "8", "ROLE_NAME": "rank", "WORLD_SIZE": "8"}


def test_ranks_of_a_dimensionless_point_is_a_world_of_one():
    ranks = Ranks.of(Point(0, Extent([], [])))
    assert (ranks.rank, ranks.local_rank, ranks.world_size, ranks.local_world_size) == (0, 0, 1, 1)


def test_setup_refuses_half_a_master_and_other_meshes():
    with pytest.raises(AssertionError, match="Either both master_addr and master_port must be "
                                             "specified or neither must be specified."):
        setup_torch_elastic_env(object(), master_addr="127.0.0.1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expects a ProcMesh, got object"):
        setup_torch_elastic_env(object())  # type: ignore[arg-type]


# Real processes.

def test_setup_sets_torchrun_env_per_rank_on_2x2(mesh):
    port = loopback_port()
    setup_torch_elastic_env(mesh, "127.0.0.1", port)
    seen = mesh.spawn("env_capture", EnvCapture).env.call().get()
    assert len(seen) == 4
    for point, env in seen.items():
        assert env == expected_env(point["hosts"], point["gpus"], "127.0.0.1", port)


def test_own_actors_can_init_process_group_after_setup(mesh):
    setup_torch_elastic_env(mesh, "127.0.0.1", loopback_port())
    sums = mesh.spawn("allreduce", AllReduce).sum_of_ranks.call().get()
    assert list(sums.values()) == [0 + 1 + 2 + 3] * 4


async def test_async_setup_picks_the_first_rank_as_master(mesh):
    await setup_torch_elastic_env_async(mesh, use_ipaddr=AddrType.IPv4)
    seen = await mesh.spawn("env_capture", EnvCapture).env.call()
    addrs = {(env["MASTER_ADDR"], env["MASTER_PORT"]) for env in seen.values()}
    assert len(addrs) == 1
    addr, port = addrs.pop()
    assert addr == get_ipaddr(socket.gethostname(), 0, AddrType.IPv4) and int(port) > 0
    assert [env["RANK"] for env in seen.values()] == ["0", "1", "2", "3"]


def test_get_host_port_on_the_first_rank(mesh):
    spmd = mesh.spawn("spmd_hp", SPMDActor)
    first = spmd.slice(**dict.fromkeys(mesh._labels, 0))  # as Monarch's documentation does
    host, port = first.get_host_port.call_one(None).get()
    assert host == socket.gethostname() and isinstance(port, int) and port > 0
    ip, _ = first.get_host_port.call_one(AddrType.IPv4).get()
    assert ip == get_ipaddr(socket.gethostname(), 0, AddrType.IPv4)


def read_reports(out: Path) -> dict[int, dict]:
    return {int(p.stem[4:]): json.loads(p.read_text()) for p in out.glob("rank*.json")}


def test_main_runs_a_script_path_with_torchrun_env(mesh, tmp_path):
    script = tmp_path / "report.py"
    script.write_text(REPORT_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    port = loopback_port()
    spmd = mesh.spawn("spmd_script", SPMDActor)
    results = spmd.main.call("127.0.0.1", port, [str(script), "--flag", str(out)]).get()
    assert list(results.values()) == [True] * 4
    reports = read_reports(out)
    assert sorted(reports) == [0, 1, 2, 3]
    for rank, seen in reports.items():
        assert seen["env"] == expected_env(rank // 2, rank % 2, "127.0.0.1", port)
        assert seen["argv"] == [str(script), "--flag", str(out)]
        assert seen["name"] == "__main__"


def test_main_runs_a_module_with_dash_m(mesh, tmp_path):
    (tmp_path / "spmd_report_mod.py").write_text(REPORT_SCRIPT)
    out = tmp_path / "out"
    out.mkdir()
    mesh.spawn("paths", EnvCapture).add_sys_path.call(str(tmp_path)).get()
    port = loopback_port()
    spmd = mesh.spawn("spmd_module", SPMDActor)
    results = spmd.main.call("127.0.0.1", port, ["-m", "spmd_report_mod", str(out)]).get()
    assert list(results.values()) == [True] * 4
    reports = read_reports(out)
    assert sorted(reports) == [0, 1, 2, 3]
    for rank, seen in reports.items():
        assert seen["env"] == expected_env(rank // 2, rank % 2, "127.0.0.1", port)
        assert seen["argv"] == [str(tmp_path / "spmd_report_mod.py"), str(out)]
        assert seen["name"] == "__main__"


def test_ddp_over_gloo_ends_with_the_same_parameters_on_every_rank(mesh, tmp_path):
    import torch

    spmd = mesh.spawn("spmd_ddp", SPMDActor)
    args = [str(EXAMPLES / "spmd_ddp_train.py"), "--steps", "5", "--out", str(tmp_path)]
    assert list(spmd.main.call("127.0.0.1", loopback_port(), args).get().values()) == [True] * 4
    params = [torch.load(tmp_path / f"rank{rank}.pt") for rank in range(4)]
    for p in params[1:]:
        assert torch.equal(params[0], p)


def test_sys_exit_zero_is_success(mesh, tmp_path):
    script = tmp_path / "exits.py"
    script.write_text("import sys\nsys.exit(0)\nraise AssertionError('not reached')\n")
    spmd = mesh.spawn("spmd_exit0", SPMDActor)
    assert list(spmd.main.call("127.0.0.1", 1, [str(script)]).get().values()) == [True] * 4


def test_a_raising_script_surfaces_as_actor_error_with_its_traceback(mesh, tmp_path):
    script = tmp_path / "fails.py"
    script.write_text("def step(n):\n    raise ValueError(f'diverged at step {n}')\n\nstep(3)\n")
    spmd = mesh.spawn("spmd_raise", SPMDActor)
    with pytest.raises(ActorError) as info:
        spmd.slice(hosts=0, gpus=1).main.call_one("127.0.0.1", 1, [str(script)]).get()
    assert isinstance(info.value.exception, ValueError)
    text = str(info.value)
    assert "Actor call spmd_raise.main failed." in text
    assert f'File "{script}", line 2, in step' in text
    assert text.rstrip().endswith("ValueError: diverged at step 3")
    assert spmd.slice(hosts=0, gpus=1).setup_env.call_one("127.0.0.1", 1).get() is None


def test_a_nonzero_exit_fails_the_call(mesh, tmp_path):
    # Monarch 0.7.0 lets the SystemExit escape the endpoint; the runtime decides what a
    # BaseException escaping an endpoint is (an actor failure, SupervisionError, in 0.7.0).
    script = tmp_path / "exits3.py"
    script.write_text("import sys\nsys.exit(3)\n")
    spmd = mesh.spawn("spmd_exit3", SPMDActor)
    with pytest.raises((ActorError, SupervisionError)) as info:
        spmd.slice(hosts=1, gpus=1).main.call_one("127.0.0.1", 1, [str(script)]).get()
    assert "SystemExit: 3" in str(info.value)


def test_main_refuses_no_script_and_a_bare_dash_m(mesh):
    spmd = mesh.spawn("spmd_empty", SPMDActor).slice(hosts=0, gpus=0)
    with pytest.raises(ActorError, match="No script or module specified"):
        spmd.main.call_one("127.0.0.1", 1, []).get()
    with pytest.raises(ActorError, match="No module specified after -m"):
        spmd.main.call_one("127.0.0.1", 1, ["-m"]).get()


def test_public_names_as_in_monarch_0_7_0():
    import monarch.spmd

    assert sorted(monarch.spmd.__all__) == ["SPMDActor", "setup_torch_elastic_env",
                                            "setup_torch_elastic_env_async"]


def test_importing_spmd_starts_nothing():
    done = what_importing_does("monarch.spmd", "monarch.tools.network")
    assert (done.threads, done.sockets, done.environment) == ([], [], [])
    assert "torch" not in done.loaded
