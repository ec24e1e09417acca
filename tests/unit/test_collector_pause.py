"""`_runtime._collector.paused`: the garbage collector held off for a CPU-bound section (the
admin API's topology answer), on again after the last of the sections paused at once, and a
script's own `gc.disable()` left as it was."""

from __future__ import annotations

import gc
import threading

import pytest

from monarch._runtime import _collector


@pytest.fixture(autouse=True)
def _collector_restored():
    was = gc.isenabled()
    yield
    (gc.enable if was else gc.disable)()


def test_a_section_pauses_the_collector_and_resumes_it():
    gc.enable()
    with _collector.paused():
        assert not gc.isenabled()
        junk = [[i] for i in range(5 * gc.get_threshold()[0])]
        assert gc.get_count()[0] > 4 * gc.get_threshold()[0]  # past it, and no collection ran
        del junk
    assert gc.isenabled()


def test_overlapping_sections_on_threads_resume_after_the_last():
    gc.enable()
    entered, leave = threading.Barrier(3), threading.Event()
    states = []

    def section() -> None:
        with _collector.paused():
            entered.wait(10)
            leave.wait(10)
        states.append(gc.isenabled())

    threads = [threading.Thread(target=section) for _ in range(2)]
    for thread in threads:
        thread.start()
    entered.wait(10)
    assert not gc.isenabled()
    with _collector.paused():  # a third, ending first
        pass
    assert not gc.isenabled()  # the threads' sections still run
    leave.set()
    for thread in threads:
        thread.join(10)
    assert gc.isenabled() and len(states) == 2


def test_an_error_resumes_it_and_a_scripts_disable_stands():
    gc.enable()
    with pytest.raises(RuntimeError):
        with _collector.paused():
            raise RuntimeError("boom")
    assert gc.isenabled()
    gc.disable()
    with _collector.paused():
        pass
    assert not gc.isenabled()
