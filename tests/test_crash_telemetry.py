"""What an actor recorded just before its proc was SIGKILLed reaches the store: its log lines
and user spans, which it had no time to ship, come back from its crash files."""

from __future__ import annotations

import os
import signal
from typing import Any

import pytest
from waiting import wait_until

from monarch.actor import Actor, SupervisionError, endpoint, this_host
from monarch.telemetry import span

pytestmark = pytest.mark.timeout(120)


class LastWords(Actor):
    @endpoint
    def say_then_die(self, token: str) -> None:
        with span(f"last-span-{token}"):
            for i in range(20):
                print(f"last words {token} {i}")
        os.kill(os.getpid(), signal.SIGKILL)  # long before the next shipment (100 ms)


def test_lines_and_spans_written_just_before_a_sigkill_reach_the_store(fault_log: Any) -> None:
    from monarch._controller._job import current_job

    procs = this_host().spawn_procs(per_host={"gpus": 1})
    store = current_job().store
    mesh = procs.spawn("last_words", LastWords)
    token = os.urandom(4).hex()
    with pytest.raises(SupervisionError):
        mesh.say_then_die.call_one(token).get(timeout=30)

    def said() -> list[str]:
        return [r.text for r in store.logs(text=f"last words {token}", limit=100)]

    lines = wait_until(lambda: len(said()) == 20 and said(), "the 20 lines", timeout=30)
    assert lines == [f"last words {token} {i}" for i in range(20)]  # each once, in order
    spans = store.spans(name=f"last-span-{token}", limit=10)
    assert len(spans) == 1 and spans[0].source.startswith(procs._procs)
    assert not list(current_job().run_dir.glob(f"{procs._procs}*.tlog*"))  # read, removed


def test_crash_files_hold_what_was_not_shipped_and_each_record_once(tmp_path: Any) -> None:
    from monarch.telemetry import Recorder
    from monarch.telemetry._recorder import recovered_batch

    from types import MappingProxyType

    recorder = Recorder()
    recorder.keep_for_crash(str(tmp_path / "p-0"))
    # tags as the capture has them: a read-only mapping (msgpack packs no such thing as is)
    line = lambda i: (i, i, "stdout", 20, f"line {i}",  # noqa: E731
                      MappingProxyType({"rank": 0}), None)
    for i in range(3):
        recorder.add_log(line(i))
    assert recorder.drain() is not None  # shipped 0-2: still on file until the next turn
    for i in range(3, 5):
        recorder.add_log(line(i))
    recorder.drain()  # turns: the file of 0-2 now takes 5-6
    for i in range(5, 7):
        recorder.add_log(line(i))
    resource = {"host": "h", "proc": "p-0", "pid": 9, "job": "j"}
    batch = recovered_batch(str(tmp_path / "p-0"), resource)
    assert batch is not None and batch[1]["recovered"] is True
    texts = sorted(wire[4] for wire in batch[3])
    assert texts == [f"line {i}" for i in range(3, 7)]  # what was not shipped, and the last
    assert all(wire[5] == {**resource, "rank": 0} for wire in batch[3])
    assert not list(tmp_path.iterdir())  # read once, removed
    assert recovered_batch(str(tmp_path / "p-0"), resource) is None


def test_crash_files_grow_past_their_first_size_and_keep_every_record(tmp_path: Any) -> None:
    """The files are mapped into memory (no system call per line) and double when full."""
    from monarch.telemetry import Recorder
    from monarch.telemetry._crashlog import FIRST_BYTES
    from monarch.telemetry._recorder import recovered_batch

    recorder = Recorder(max_logs=100_000)
    recorder.keep_for_crash(str(tmp_path / "p-1"))
    text = "x" * 200
    count = 4 * FIRST_BYTES // len(text)
    for i in range(count):
        recorder.add_log((i, i, "stdout", 20, f"{i} {text}", {"rank": 1}, None))
    assert (tmp_path / "p-1.tlog0").stat().st_size > FIRST_BYTES
    batch = recovered_batch(str(tmp_path / "p-1"), {"proc": "p-1", "pid": 3})
    assert batch is not None
    assert sorted(int(wire[4].split()[0]) for wire in batch[3]) == list(range(count))


def test_the_store_keeps_of_a_recovered_batch_only_what_it_lacks() -> None:
    from monarch.telemetry import Store
    from monarch.telemetry._batch import BATCH_VERSION

    resource = {"host": "h", "proc": "p-0", "pid": 9, "job": "j"}
    tags = {**resource, "rank": 0}
    shipped = [[i, i, "stdout", 20, f"line {i}", tags, None, None] for i in range(3)]
    store = Store()
    store.ingest([BATCH_VERSION, resource, [], shipped, [], [], []])
    again = shipped[1:] + [[3, 3, "stdout", 20, "line 3", tags, None, None]]
    store.ingest([BATCH_VERSION, {**resource, "recovered": True}, [], again, [], [], []])
    assert [r.text for r in store.logs()] == ["line 0", "line 1", "line 2", "line 3"]
    assert "recovered" not in store.resources()["p-0"]


class Spawner(Actor):
    @endpoint
    def start_background(self, token: str) -> None:
        import logging
        import threading

        def work() -> None:
            print(f"background print {token}")
            logging.getLogger("lib").warning(f"background log {token}")

        thread = threading.Thread(target=work)
        thread.start()
        thread.join()


def test_a_thread_an_actor_starts_logs_with_the_actors_tags(fault_log: Any) -> None:
    """torchft's background threads logged as `[actor=<root>]`, with no mesh in the logs
    table: a thread started by an actor carries its tags."""
    from monarch._controller._job import current_job

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        store = current_job().store
        token = os.urandom(4).hex()
        procs.spawn("spawner", Spawner).start_background.call(token).get(timeout=30)
        found = wait_until(lambda: len(store.logs(text=token, limit=10)) == 4
                           and store.logs(text=token, limit=10), "the 4 background lines")
        assert sorted((r.tags.get("mesh"), r.tags.get("rank"), r.text.split()[1])
                      for r in found) == [("spawner", 0, "log"), ("spawner", 0, "print"),
                                          ("spawner", 1, "log"), ("spawner", 1, "print")]
    finally:
        procs.stop().get(timeout=30)
