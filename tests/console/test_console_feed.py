"""The console's feed (`console/_feed.py`): one poll asks for everything at once, and a job
that cannot answer is reported by its first error alone."""

from __future__ import annotations

import threading

from fakeclient import FakeClient
from monarch.admin import AdminError
from monarch.console._feed import Feed


class Meeting(FakeClient):
    """Each request waits until all five of a poll are in flight: asked one after another,
    the first would wait alone and fail (BrokenBarrierError after 10 s)."""

    def __init__(self) -> None:
        super().__init__()
        self.meeting = threading.Barrier(5, timeout=10)

    def _meet(self, answer):
        self.meeting.wait()
        return answer

    def job(self):
        return self._meet(super().job())

    def topology(self, rows=None):
        return self._meet(super().topology(rows))

    def sessions(self):
        return self._meet(super().sessions())

    def spans(self, *args, **kwargs):
        return self._meet(super().spans(*args, **kwargs))

    def transfers(self, *args, **kwargs):
        return self._meet(super().transfers(*args, **kwargs))


def test_a_poll_asks_for_everything_at_once():
    snap = Feed(Meeting()).poll_once()
    assert snap.error is None
    assert snap.job is not None and snap.topology is not None and snap.transfers is not None


class Gone(FakeClient):
    def job(self):
        raise AdminError("cannot reach the admin API at 127.0.0.1:1: ConnectionRefused")

    def topology(self, rows=None):
        raise AdminError("cannot reach the admin API at 127.0.0.1:1: ConnectionRefused")


def test_an_unreachable_job_is_reported_once_and_nothing_else_is_shown():
    snap = Feed(Gone()).poll_once()
    assert snap.error == ("job: AdminError: cannot reach the admin API at 127.0.0.1:1: "
                          "ConnectionRefused")
    assert snap.job is None and snap.topology is None and snap.spans == []


def test_a_poll_asks_for_the_rows_the_app_shows():
    """The app names the meshes whose actors it shows (`Feed.rows`); the others come folded.
    A client without `rows` (a finished job's history) is asked for everything."""
    client = FakeClient()
    feed = Feed(client)
    assert "folded" not in feed.poll_once().topology["meshes"][0]  # None: every actor
    feed.rows = frozenset({"m2"})
    trainers, generators = feed.poll_once().topology["meshes"]
    assert client.rows_asked == [None, frozenset({"m2"})]
    assert trainers["folded"]["local"]["actors"] == 4 and "folded" not in generators
    assert [a["rank"] for a in trainers["actors"]] == [3]  # the failed one alone

    class Old(FakeClient):
        def topology(self):
            return super().topology()

    old = Feed(Old())
    old.rows = frozenset()
    assert "folded" not in old.poll_once().topology["meshes"][0]
