"""A script run twice (or more) by the job tests: it asks its job for state, spawns a mesh on
each host mesh, and prints one JSON line with what answered and how long `state()` took.

    python job_client.py process|slurm [--hang] [--port P] [--log-dir D]

With `--hang` it prints `READY` afterwards and waits to be killed (a client that dies).
"""

import argparse
import json
import os
import sys
import time

from monarch._runtime._pids import proc_stat
from monarch.actor import Actor, current_rank, endpoint


class Where(Actor):
    @endpoint
    def where(self) -> dict:
        zygote = os.getppid()
        worker = int(proc_stat(zygote)[1])  # the zygote's parent
        return {"point": dict(current_rank()), "pid": os.getpid(), "worker": worker,
                "node": os.environ.get("SLURMD_NODENAME")}


def make_job(args: argparse.Namespace):
    if args.kind == "process":
        from monarch.job import ProcessJob

        return ProcessJob({"trainers": 2, "gen": 1})
    from monarch.job import SlurmJob

    return SlurmJob({"trainers": 3, "gen": 1}, monarch_port=args.port, log_dir=args.log_dir,
                    job_start_timeout=120)  # the 4 nodes of the test cluster


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("kind", choices=["process", "slurm"])
    parser.add_argument("--hang", action="store_true")
    parser.add_argument("--port", type=int, default=22222)
    parser.add_argument("--log-dir", default=None)
    args = parser.parse_args()
    start = time.monotonic()
    state = make_job(args).state()
    attach_s = time.monotonic() - start
    found = {}
    for name in ("trainers", "gen"):
        mesh = getattr(state, name).spawn_procs(per_host={"gpus": 2}).spawn("where", Where)
        found[name] = [value for _, value in mesh.where.call().get(timeout=120).items()]
    sys.stdout.write(json.dumps({"state_s": attach_s, "meshes": found}) + "\n")
    sys.stdout.flush()
    if args.hang:
        sys.stdout.write("READY\n")
        sys.stdout.flush()
        sys.stdin.read()  # until the test kills us


if __name__ == "__main__":
    main()
