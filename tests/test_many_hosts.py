"""More hosts, really: a ProcessJob of 8 hosts (8 worker processes, each on its own loopback
address), a 32-proc mesh that casts and slices, a host that dies and is brought back."""

from __future__ import annotations

import os
import signal

import pytest
from waiting import wait_gone

from monarch._runtime._rundir import run_root, sweep_dead
from monarch.actor import Actor, SupervisionError, current_rank, endpoint
from monarch.job import ProcessJob

pytestmark = pytest.mark.timeout(400)


class Rank(Actor):
    @endpoint
    def who(self) -> dict:
        from monarch._runtime._identity import current_process

        me = current_process()
        return {"point": dict(current_rank()), "pid": os.getpid(), "ip": me.bind_host,
                "host": me.hostname}


def test_32_procs_on_8_hosts_cast_slice_lose_a_host_and_respawn_there(fault_log):
    job = ProcessJob({"hosts": 8})
    try:
        hosts = job.state(cached_path=None).hosts
        assert hosts.sizes == {"hosts": 8}
        mesh = hosts.spawn_procs(per_host={"gpus": 4}).spawn("ranks", Rank)
        found = mesh.who.call().get(timeout=180)
        assert len(found) == 32 and len({v["pid"] for v in found.values()}) == 32
        where = {}
        for point, info in found.items():
            where.setdefault(point["hosts"], set()).add((info["ip"], info["host"]))
        assert where == {h: {(f"127.0.0.{2 + h}", f"hosts_{h}")} for h in range(8)}

        _admin_sends_one_hosts_rows(32)

        # Casts to slices reach exactly the ranks selected (points are the slice's own).
        pid_at = {(p["hosts"], p["gpus"]): v["pid"] for p, v in found.items()}
        firsts = mesh.slice(gpus=0).who.call().get(timeout=60)
        assert [v["pid"] for v in firsts.values()] == [pid_at[h, 0] for h in range(8)]
        assert [v["point"] for v in firsts.values()] == [{"hosts": h} for h in range(8)]
        block = mesh.slice(hosts=slice(2, 6), gpus=slice(1, 3)).who.call().get(timeout=60)
        assert [v["pid"] for v in block.values()] == [
            pid_at[h, g] for h in range(2, 6) for g in (1, 2)]

        # Host 5 fails: its worker is killed, and its procs with it.
        victim = job.workers["hosts_5"]
        lost_pids = [v["pid"] for p, v in found.items() if p["hosts"] == 5]
        os.kill(victim.pid, signal.SIGKILL)
        failure = fault_log.wait_for(
            lambda f: f.name == "ranks" and "hosts_5" in f.report(), timeout=60)
        assert "was lost" in failure.report()
        wait_gone(victim.pid, *lost_pids)
        with pytest.raises(SupervisionError):
            mesh.slice(hosts=5, gpus=0).who.call_one().get(timeout=30)
        assert len(mesh.slice(hosts=slice(0, 5)).who.call().get(timeout=60)) == 20
        assert len(mesh.slice(hosts=slice(6, 8)).who.call().get(timeout=60)) == 8

        # Asking the job for its state again brings host 5 back; procs respawn there.
        hosts = job.state(cached_path=None).hosts
        assert job.workers["hosts_5"].pid != victim.pid
        again = hosts.slice(hosts=5).spawn_procs(per_host={"gpus": 4}).spawn("again", Rank)
        back = again.who.call().get(timeout=120)
        assert {(v["ip"], v["host"]) for v in back.values()} == {("127.0.0.7", "hosts_5")}
        assert not {v["pid"] for v in back.values()} & set(lost_pids)
        assert len(mesh.slice(hosts=0).who.call().get(timeout=60)) == 4  # the rest lives on
    finally:
        workers = [s.pid for s in job.workers.values()]
        job.kill()
    wait_gone(*workers)
    sweep_dead(run_root())  # what the next job would do for the SIGKILLed worker's directory


def _admin_sends_one_hosts_rows(size: int) -> None:
    """The admin API's host windows (`rows=["<mesh id>@<host id>"]`, what `monarch top` asks
    when a big mesh is open on some hosts): that mesh comes folded, a summary per host, with
    every actor of the hosts asked and none of the others (they all run)."""
    from monarch._controller._job import current_job
    from monarch.admin import AdminClient

    running = current_job()
    admin = AdminClient(running.admin.address, running.admin.token)
    topo = admin.topology(rows=[])
    (folded,) = [m for m in topo["meshes"] if m["name"] == "ranks"
                 and len(m["rank_procs"]) == size]
    host_id = {h["hostname"]: h["id"] for h in topo["hosts"]}
    assert len(folded["folded"]) == 8 and folded["open_hosts"] == []
    assert all(s["actors"] == 4 for s in folded["folded"].values())
    on_host = {h["id"]: {p["proc"] for p in h["procs"]} for h in topo["hosts"]}
    wanted = [host_id["hosts_3"], host_id["hosts_6"]]
    shown = next(m for m in admin.topology(rows=[f"{folded['mesh']}@{h}" for h in wanted])[
        "meshes"] if m["mesh"] == folded["mesh"])
    assert shown["open_hosts"] == sorted(wanted) and len(shown["folded"]) == 8
    assert sorted(a["rank"] for a in shown["actors"]) == [*range(12, 16), *range(24, 28)]
    assert all(a["proc"] in on_host[wanted[0]] | on_host[wanted[1]] for a in shown["actors"])
    whole = next(m for m in admin.topology(rows=[folded["mesh"]])["meshes"]
                 if m["mesh"] == folded["mesh"])
    assert "folded" not in whole and len(whole["actors"]) == size

