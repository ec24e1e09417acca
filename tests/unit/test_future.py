"""Future: get with timeouts, lazy values, callbacks, await, coroutines."""

from __future__ import annotations

import asyncio
import threading

import pytest

from monarch._future import Future
from monarch.actor import returns_future


def test_get_waits_for_a_value_set_by_another_thread():
    fut: Future[int] = Future()
    threading.Timer(0.05, fut.set_result, args=(5,)).start()
    assert fut.get(timeout=5) == 5 and fut.result() == 5 and fut.exception() is None


def test_timeout_and_exception():
    fut: Future[int] = Future()
    with pytest.raises(TimeoutError):
        fut.get(timeout=0.01)
    fut.set_exception(KeyError("k"))
    with pytest.raises(KeyError):
        fut.get()
    assert isinstance(fut.exception(), KeyError)
    fut.set_result(1)  # later settlements are ignored
    assert isinstance(fut.exception(), KeyError)


def test_lazy_values_are_computed_once_in_the_consumer():
    calls = []
    fut: Future[int] = Future()
    fut.set_lazy(lambda: calls.append(threading.current_thread()) or 9)
    assert fut.get() == 9 and fut.get() == 9
    assert calls == [threading.current_thread()]


def test_callbacks_run_once_settled():
    fut: Future[int] = Future()
    seen = []
    fut.add_done_callback(lambda: seen.append("early"))
    fut.set_result(1)
    fut.add_done_callback(lambda: seen.append("late"))
    assert seen == ["early", "late"]


def test_await_and_as_asyncio():
    fut: Future[int] = Future()

    async def main() -> int:
        threading.Timer(0.02, fut.set_result, args=(3,)).start()
        first = await fut
        second = await fut.as_asyncio()
        return first + second

    assert asyncio.run(main()) == 6


def test_returns_future_runs_the_coroutine_either_way():
    @returns_future
    async def double(x: int) -> int:
        await asyncio.sleep(0)
        return 2 * x

    assert double(4).get() == 8

    async def main() -> int:
        return await double(5)

    assert asyncio.run(main()) == 10


def test_awaiting_a_future_that_already_failed_lets_what_the_loop_holds_run_first():
    """The failure came before the await (the answer beat the coroutine): what was handed to
    the loop before it (an owner's `__supervise__` of that failure) still runs before the
    await raises, as when the failure wakes a pending await."""
    order: list[str] = []

    async def main() -> None:
        fut: Future[int] = Future()
        asyncio.get_running_loop().call_soon(order.append, "queued before the failure")
        fut.set_exception(RuntimeError("boom"))
        with pytest.raises(RuntimeError, match="boom"):
            await fut
        order.append("await raised")
        done: Future[int] = Future()
        done.set_result(3)
        assert await done == 3

    asyncio.run(main())
    assert order == ["queued before the failure", "await raised"]
