"""Procs ship their log lines twice a second while someone watches the job live, once a second
while nobody does (`_controller._watched`): a store subscription or an admin API request makes
every proc watched, a proc that starts meanwhile starts watched, and the procs go back to the
slower pace when the watching ends. Lines arrive either way."""

from __future__ import annotations

import time
from typing import Any

import pytest

from monarch._controller import _watched
from monarch._runtime import _instrument
from monarch.actor import Actor, endpoint, this_host
from waiting import wait_until

pytestmark = pytest.mark.timeout(120)


class Paced(Actor):
    @endpoint
    def watched(self) -> bool:
        return _instrument.WATCHED

    @endpoint
    def say(self, text: str) -> None:
        print(text, flush=True)


def _job() -> Any:
    from monarch._controller._job import current_job

    job = current_job()
    assert job is not None
    return job


def _states(mesh: Any) -> set[bool]:
    return set(mesh.watched.call().get(timeout=30).values())


@pytest.fixture
def paced(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setattr(_watched, "ADMIN_WATCH_S", 0.5)  # earlier tests' requests age fast
    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        yield procs, procs.spawn("paced", Paced)
    finally:
        procs.stop().get(timeout=30)


def test_a_subscription_makes_every_proc_watched_until_it_closes(paced: Any) -> None:
    procs, mesh = paced
    job = _job()
    wait_until(lambda: _states(mesh) == {False}, "procs start unwatched", 15)
    with job.store.subscribe(kinds=["log"]) as feed:
        wait_until(lambda: _states(mesh) == {True}, "a subscription watches every proc", 15)
        late = this_host().spawn_procs(per_host={"gpus": 1})  # started while watched
        try:
            late_mesh = late.spawn("paced_late", Paced)
            wait_until(lambda: _states(late_mesh) == {True}, "a new proc starts watched", 15)
        finally:
            late.stop().get(timeout=30)
        mesh.say.call("watched-line").get(timeout=30)
        seen: list[str] = []
        wait_until(lambda: seen.extend(r.text for r in feed.wait(timeout=0.2)) or
                   "watched-line" in seen, "the line reaches the subscription", 15)
    wait_until(lambda: _states(mesh) == {False}, "back to unwatched once it closed", 15)
    assert _instrument.WATCHED is False  # the controller's own flag is never set


def test_an_admin_request_watches_the_job_for_a_while(paced: Any) -> None:
    from monarch.admin import AdminClient

    procs, mesh = paced
    job = _job()
    assert job.admin is not None
    wait_until(lambda: _states(mesh) == {False}, "procs start unwatched", 15)
    client = AdminClient(job.admin.address, job.admin.token)
    try:
        client.topology()
        assert time.monotonic() - job.admin.last_request < 60
        # polled as a console does (a request ages out after ADMIN_WATCH_S, here 0.5 s)
        wait_until(lambda: client.topology() is not None and _states(mesh) == {True},
                   "a console's polls watch the job", 15)
        wait_until(lambda: _states(mesh) == {False},
                   "unwatched once no request came for ADMIN_WATCH_S", 15)
    finally:
        client.close()


def test_lines_arrive_while_nobody_watches(paced: Any) -> None:
    procs, mesh = paced
    job = _job()
    wait_until(lambda: _states(mesh) == {False}, "procs start unwatched", 15)
    mesh.say.call("unwatched-line").get(timeout=30)
    wait_until(lambda: len(job.store.logs(text="unwatched-line")) == 2,
               "both procs' lines reach the store at the slower pace", 15)


def test_the_pace_follows_the_flag() -> None:
    pace = _instrument.Pace(100.0)
    pace.sent_at = 100.0
    was = _instrument.WATCHED
    try:
        _instrument.set_watched({"watched": True})
        assert pace.live_due(100.0 + _instrument.LIVE_S)
        _instrument.set_watched({"watched": False})
        assert not pace.live_due(100.0 + _instrument.LIVE_S)
        assert pace.live_due(100.0 + _instrument.UNWATCHED_LIVE_S)
    finally:
        _instrument.WATCHED = was
