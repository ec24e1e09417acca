"""JobTrait's lifecycle and cache, with a job whose "allocation" is a record in memory, and
the job helpers that need no processes (spec import, sbatch script)."""

from __future__ import annotations

import pickle

import pytest

from monarch._jobs._trait import CachedRunning
from monarch.job import (JobState, JobTrait, SlurmJob, job_load, job_loads, load_current_job,
                         set_current_job)

ALIVE: set[str] = set()
"""Names of the pretend allocations that are alive."""


class PretendJob(JobTrait):
    """Its allocation is a name in ALIVE; its host meshes are strings."""

    def __init__(self, meshes: tuple[str, ...] = ("trainers",), fail_connect: bool = False):
        super().__init__()
        self.meshes = meshes
        self.fail_connect = fail_connect
        self.name: str | None = None
        self.created = 0

    def _create(self, client_script):
        self.created += 1
        self.name = f"alloc-{id(self)}-{self.created}"
        ALIVE.add(self.name)

    def _state(self):
        if self.fail_connect or self.name not in ALIVE:
            raise ConnectionError("the workers do not answer")
        return JobState({m: f"{self.name}/{m}" for m in self.meshes})

    def can_run(self, spec):
        return isinstance(spec, PretendJob) and spec.meshes == self.meshes and \
            self.name in ALIVE

    def _kill(self):
        ALIVE.discard(self.name)


def test_apply_creates_once_and_state_saves_the_running_job(tmp_path):
    job = PretendJob(("trainers", "gen"))
    assert not job.active and job.apply_id is None
    cache = str(tmp_path / "sub" / "job_state.pkl")
    state = job.state(cached_path=cache)
    assert state.trainers == f"{job.name}/trainers" and job.created == 1
    job.apply()
    job.state(cached_path=cache)
    assert job.created == 1 and job.active and job.apply_id
    saved = job_load(cache)
    assert saved.name == job.name and saved.active and saved.apply_id == job.apply_id


def test_a_second_run_attaches_to_the_cached_allocation(tmp_path):
    cache = str(tmp_path / "job_state.pkl")
    first = PretendJob()
    first.state(cached_path=cache)
    second = PretendJob()  # the same script, run again
    state = second.state(cached_path=cache)
    assert second.created == 0 and state.trainers == f"{first.name}/trainers"
    assert isinstance(second._status, CachedRunning) and second.apply_id == first.apply_id
    second.kill()
    assert first.name not in ALIVE and not second.active


@pytest.mark.parametrize("change", ["dead", "other spec", "does not answer", "garbage"])
def test_a_cached_job_that_cannot_serve_is_killed_and_replaced(tmp_path, change):
    cache = tmp_path / "job_state.pkl"
    old = PretendJob(fail_connect=change == "does not answer")
    old.state(cached_path=None) if change != "does not answer" else old.apply()
    old.dump(str(cache))
    if change == "dead":
        ALIVE.discard(old.name)
    if change == "garbage":
        cache.write_bytes(b"not a pickle")
    spec = PretendJob(("evaluators",) if change == "other spec" else ("trainers",))
    state = spec.state(cached_path=str(cache))
    assert spec.created == 1 and spec._status == "running"
    if change != "garbage":  # (an unreadable cache names no allocation to end)
        assert old.name not in ALIVE  # the stale allocation was ended
    assert job_load(str(cache)).name == spec.name  # and the new one saved in its place
    assert getattr(state, spec.meshes[0]) == f"{spec.name}/{spec.meshes[0]}"


def test_no_cache_path_reads_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    PretendJob().state(cached_path=None)
    assert not (tmp_path / ".monarch").exists()


def test_dumps_and_loads_round_trip_and_refuse_other_objects():
    job = PretendJob(("a", "b"))
    job.apply()
    back = job_loads(job.dumps())
    assert back.name == job.name and back.state(cached_path=None).b == f"{job.name}/b"
    with pytest.raises(TypeError, match="not a job"):
        job_loads(pickle.dumps({"a": 1}))


def test_job_state_names_what_it_has():
    state = JobState({"trainers": 1, "gen": 2})
    assert state.gen == 2
    with pytest.raises(AttributeError, match="'x' is not a valid host mesh name. Available "
                                             "names: gen, trainers"):
        state.x


def test_a_job_file_or_dotted_path_is_the_project_job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "myjob.py").write_text(
        "from monarch.job import ProcessJob\njob = ProcessJob({'trainers': 3})\n"
        "if __name__ == '__main__':\n    raise SystemExit('must not run')\n")
    set_current_job("myjob.py")
    job = load_current_job()
    assert job._meshes == {"trainers": 3} and not job.active
    monkeypatch.syspath_prepend(str(tmp_path))
    set_current_job("myjob.job")
    assert load_current_job()._meshes == {"trainers": 3}
    (tmp_path / ".monarch" / "default" / "spec").unlink()
    with pytest.raises(FileNotFoundError, match="monarch apply"):
        load_current_job()


def test_the_sbatch_script_asks_for_every_mesh_at_once(tmp_path):
    job = SlurmJob({"trainers": 2, "gen": 1}, log_dir=str(tmp_path), monarch_port=23000,
                   partition="debug", time_limit="01:00:00", slurm_args=["--qos=dev", "nope"])
    job._secret_file = str(tmp_path / "s")
    script = job._script()
    for line in ("#SBATCH --nodes=3", "#SBATCH --exclusive", "#SBATCH --partition=debug",
                 "#SBATCH --time=01:00:00", "#SBATCH --qos=dev", "#SBATCH --ntasks-per-node=1",
                 f"export MONARCH_WORKER_SECRET_FILE={tmp_path / 's'}"):
        assert line in script.splitlines()
    assert "nope" not in script and "--port $((23000 + SLURM_LOCALID))" in script
    assert "#SBATCH --exclusive" not in SlurmJob({"a": 1}, exclusive=False)._script()
    with pytest.raises(NotImplementedError, match="out_of_cluster"):
        SlurmJob({"a": 1}, out_of_cluster=True)
    with pytest.raises(ValueError, match="positive"):
        SlurmJob({"a": 0})
