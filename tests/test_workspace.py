"""Code that follows you to the hosts: `HostMesh.sync_workspace` on a ProcessJob of 2 hosts."""

from __future__ import annotations

import os

import pytest
from waiting import wait_gone, wait_until

from monarch.actor import Actor, endpoint
from monarch.job import ProcessJob

pytestmark = pytest.mark.timeout(300)
MB = 1 << 20


class Importer(Actor):
    @endpoint
    def value(self, module: str) -> tuple:
        import importlib

        mod = importlib.import_module(module)
        return mod.VALUE, mod.__file__


@pytest.fixture(scope="module")
def two_hosts(fault_log):
    job = ProcessJob({"hosts": 2})
    hosts = job.state(cached_path=None).hosts
    yield hosts
    workers = [s.pid for s in job.workers.values()]
    job.kill()
    wait_gone(*workers)


def test_an_edited_module_is_seen_by_the_procs_after_the_next_sync(two_hosts, tmp_path):
    proj = tmp_path / "proj"
    (proj / "pkg").mkdir(parents=True)
    (proj / "ws_edited.py").write_text("VALUE = 1\n")
    (proj / "pkg" / "__init__.py").write_text("")
    (proj / "notes.txt").write_text("gone soon\n")

    stats = two_hosts.sync_workspace(path=str(proj)).get(timeout=120)
    assert [h.files for h in stats.hosts] == [3, 3]
    dirs = [h.directory for h in stats.hosts]
    assert len(set(dirs)) == 2 and not any(d.startswith(str(tmp_path)) for d in dirs)

    importers = two_hosts.spawn_procs(per_host={"gpus": 1}).spawn("importers", Importer)
    seen = importers.value.call("ws_edited").get(timeout=60)
    assert [v for v, _ in seen.values()] == [1, 1]
    assert [os.path.dirname(f) for _, f in seen.values()] == dirs  # the hosts' copies

    # Same size, other content: the hash tells. auto_reload re-imports it in live procs.
    (proj / "ws_edited.py").write_text("VALUE = 2\n")
    stats = two_hosts.sync_workspace(path=str(proj), auto_reload=True).get(timeout=120)
    assert [(h.files, h.bytes) for h in stats.hosts] == [(1, 10), (1, 10)]
    assert stats.reloaded == ("ws_edited",)
    assert [v for v, _ in importers.value.call("ws_edited").get(timeout=60).values()] == [2, 2]

    # Without auto_reload, live procs keep what they imported; new procs import the new code.
    (proj / "ws_edited.py").write_text("VALUE = 3\n")
    (proj / "notes.txt").unlink()
    stats = two_hosts.sync_workspace(path=str(proj)).get(timeout=120)
    assert [(h.files, h.deleted) for h in stats.hosts] == [(1, 1), (1, 1)]
    assert [v for v, _ in importers.value.call("ws_edited").get(timeout=60).values()] == [2, 2]
    fresh = two_hosts.spawn_procs(per_host={"gpus": 1}).spawn("fresh", Importer)
    assert [v for v, _ in fresh.value.call("ws_edited").get(timeout=60).values()] == [3, 3]
    # (The "hosts" are processes of this machine: their directories can be looked at here.)
    assert [os.path.exists(os.path.join(d, "notes.txt")) for d in dirs] == [False, False]
    assert [os.path.exists(os.path.join(d, "pkg", "__init__.py")) for d in dirs] == [True, True]


def test_a_50mb_tree_with_one_changed_file_resyncs_only_that_file(two_hosts, tmp_path):
    from monarch._controller._job import current_job

    tree = tmp_path / "big"
    (tree / "data").mkdir(parents=True)
    for i in range(50):
        (tree / "data" / f"shard{i:02d}.bin").write_bytes(os.urandom(MB))
    (tree / "train.py").write_text("STEPS = 10\n")
    total = 50 * MB + 11

    store = current_job().store

    def synced(since_ns: int) -> list[int]:
        """Bytes of each data-plane read the receivers recorded after `since_ns`."""
        return sorted(r.nbytes for r in store.transfer_records(100_000)
                      if r.dst.startswith("workspace_sync") and r.time_ns > since_ns)

    start_ns = max([r.time_ns for r in store.transfer_records(100_000)], default=0)
    first = two_hosts.sync_workspace(path=str(tree)).get(timeout=240)
    assert [(h.files, h.bytes) for h in first.hosts] == [(51, total), (51, total)]
    wait_until(lambda: len(synced(start_ns)) == 102, "the first sync's transfers")
    assert sum(synced(start_ns)) == 2 * total
    mark_ns = max(r.time_ns for r in store.transfer_records(100_000))

    (tree / "data" / "shard17.bin").write_bytes(os.urandom(MB))  # one file changes
    os.utime(tree / "data" / "shard03.bin")  # another is only touched: same content
    again = two_hosts.sync_workspace(path=str(tree)).get(timeout=240)
    assert [(h.files, h.bytes) for h in again.hosts] == [(1, MB), (1, MB)]
    # What the data plane moved, as the receivers recorded it: that file, once per host.
    wait_until(lambda: len(synced(mark_ns)) >= 2, lambda: f"the changed file transfers {len(synced(0))} {mark_ns} {[(r.dst, r.nbytes, r.time_ns) for r in store.transfer_records(100_000)][-5:]}")
    assert synced(mark_ns) == [MB, MB], synced(mark_ns)

    nothing = two_hosts.sync_workspace(path=str(tree)).get(timeout=240)
    assert nothing.files_sent == 0 and nothing.bytes_sent == 0
