"""Run by `test_multihost.test_a_new_proc_on_a_dead_procs_tcp_port_is_not_taken_for_it`, in a
network namespace whose ephemeral port range is a few ports wide: proc meshes are spawned and
stopped on one host until a proc gets the tcp port of one stopped before it. Prints JSON."""

import json
import sys

from monarch.actor import Actor, endpoint
from monarch.job import ProcessJob


class Where(Actor):
    @endpoint
    def where(self) -> str:
        from monarch._runtime import _process_runtime as _process

        return _process.current().address

    @endpoint
    def ask(self, other: object) -> str:
        return other.where.call_one().get(timeout=30)


def main() -> None:
    job = ProcessJob({"hosts": 1})
    hosts = job.state(cached_path=None).hosts
    out: dict = {"rounds": 0}
    try:
        # lives through every round: it hears of each stopped proc's death
        caller = hosts.spawn_procs(name="caller").spawn("caller", Where)
        seen = {caller.where.call_one().get(timeout=30)}
        for number in range(int(sys.argv[1])):
            procs = hosts.spawn_procs(name="round")
            try:
                mesh = procs.spawn("w", Where)
                address = mesh.where.call_one().get(timeout=30)
                assert caller.ask.call_one(mesh).get(timeout=30) == address
            except Exception as exc:  # noqa: BLE001 - reported to the test
                out["error"] = f"round {number}: {type(exc).__name__}: {exc}"
                break
            finally:
                procs.stop().get(timeout=30)
            out["rounds"] = number + 1
            if address in seen:
                out["reused"] = address
                break
            seen.add(address)
    finally:
        job.kill()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
