"""Future: get with timeouts, lazy values, callbacks, await, coroutines."""

from __future__ import annotations

import asyncio
import threading

import pytest

from monarch._runtime._future import Future, failed, resolved, when_all
from monarch.actor import returns_future


def test_get_waits_for_a_value_set_by_another_thread():
    fut: Future[int] = Future._pending()
    threading.Timer(0.05, fut.set_result, args=(5,)).start()
    assert fut.get(timeout=5) == 5 and fut.result() == 5 and fut.exception() is None


def test_timeout_and_exception():
    fut: Future[int] = Future._pending()
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
    fut: Future[int] = Future._pending()
    fut.set_lazy(lambda: calls.append(threading.current_thread()) or 9)
    assert fut.get() == 9 and fut.get() == 9
    assert calls == [threading.current_thread()]


def test_callbacks_run_once_settled():
    fut: Future[int] = Future._pending()
    seen = []
    fut.add_done_callback(lambda: seen.append("early"))
    fut.set_result(1)
    fut.add_done_callback(lambda: seen.append("late"))
    assert seen == ["early", "late"]


def test_await_and_as_asyncio():
    fut: Future[int] = Future._pending()

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
        fut: Future[int] = Future._pending()
        asyncio.get_running_loop().call_soon(order.append, "queued before the failure")
        fut.set_exception(RuntimeError("boom"))
        with pytest.raises(RuntimeError, match="boom"):
            await fut
        order.append("await raised")
        done: Future[int] = Future._pending()
        done.set_result(3)
        assert await done == 3

    asyncio.run(main())
    assert order == ["queued before the failure", "await raised"]


def test_a_future_is_not_constructed_directly():
    with pytest.raises(TypeError, match="returned by Monarch operations"):
        Future()
    with pytest.raises(TypeError, match="unexpected keyword argument 'coro'"):
        Future(coro=None)  # type: ignore[call-arg]


@pytest.mark.parametrize("bad", [float("nan"), -1.0, float("inf"), "5"])
def test_an_invalid_timeout_is_refused_before_anything_starts(bad):
    started = []

    async def body():
        started.append(1)
        return 8

    fut: Future[int] = Future._from_coro(body())
    with pytest.raises(ValueError, match="invalid timeout"):
        fut.get(timeout=bad)
    assert started == [] and not fut.done()
    assert fut.get(timeout=5) == 8
    assert fut.get(timeout=bad) == 8  # a settled future answers whatever the timeout


async def test_as_asyncio_settled_is_done_at_once_and_a_cancelled_observer_spares_the_work():
    gate = asyncio.Event()

    async def body():
        await gate.wait()
        return 5

    fut: Future[int] = Future._from_coro(body())
    first = fut.as_asyncio()
    assert first.cancel() and first.cancelled()  # only this observer
    gate.set()
    assert await fut.as_asyncio() == 5 and await fut == 5 and fut.get() == 5
    settled = fut.as_asyncio()
    assert settled.done() and settled.result() == 5


def test_as_asyncio_off_a_loop_is_refused_and_consumes_nothing():
    async def body():
        return 3

    fut: Future[int] = Future._from_coro(body())
    with pytest.raises(RuntimeError):
        fut.as_asyncio()
    assert fut.get() == 3


@pytest.mark.parametrize("error", [KeyboardInterrupt("stop"), SystemExit(3)])
def test_a_body_raising_a_base_exception_settles_and_later_bodies_still_run(error):
    async def body():
        raise error

    async def fine():
        return 4

    fut: Future[int] = Future._from_coro(body())
    with pytest.raises(type(error)) as first:
        fut.get(timeout=10)
    with pytest.raises(type(error)) as second:
        fut.get(timeout=10)
    assert second.value is first.value is error  # the same object, every time
    assert Future._from_coro(fine()).get(timeout=10) == 4  # the loop that runs bodies lives


def test_a_body_runs_in_the_context_of_its_call():
    import contextvars

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")

    @returns_future
    async def read_and_write() -> str:
        seen = var.get()
        var.set("body")  # the caller's context is not the body's
        return seen

    token = var.set("caller")
    try:
        by_get = read_and_write()
        by_await = read_and_write()
        var.set("after the call")
        assert by_get.get(timeout=10) == "caller"

        async def observe():
            var.set("in the awaiter")
            return await by_await

        assert asyncio.run(observe()) == "caller"
        assert var.get() == "after the call"
    finally:
        var.reset(token)


async def test_cancelling_the_awaiter_cancels_the_body():
    started, cancelled = asyncio.Event(), []

    async def body():
        started.set()
        try:
            await asyncio.get_running_loop().create_future()  # never settles
        except asyncio.CancelledError:
            cancelled.append(True)
            raise

    fut: Future[None] = Future._from_coro(body())
    awaiter = asyncio.ensure_future(_await(fut))
    await started.wait()
    awaiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await awaiter
    assert cancelled == [True]
    with pytest.raises(asyncio.CancelledError):
        fut.get(timeout=5)


async def _await(fut):
    return await fut


def test_a_future_never_observed_runs_nothing_and_warns_nothing():
    import gc
    import warnings

    runs = []

    @returns_future
    async def count() -> int:
        runs.append(1)
        return len(runs)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        count()
        gc.collect()
    assert runs == [] and not [w for w in caught if "never awaited" in str(w.message)]
    assert count().get(timeout=10) == 1


def test_get_on_a_running_loop_warns_while_pending_and_still_answers():
    import warnings

    async def body():
        return 5

    async def observe():
        fut: Future[int] = Future._from_coro(body())
        with pytest.warns(UserWarning, match="running asyncio event loop") as caught:
            value = fut.get(timeout=10)
        assert any("as_asyncio" in str(w.message) for w in caught)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert fut.get() == 5  # settled: no warning
        return value

    assert asyncio.run(observe()) == 5


def test_when_all_waits_for_every_future_and_fails_as_the_first_in_order():
    first, second, third = (Future._pending() for _ in range(3))
    done = when_all([first, second, third])
    third.set_exception(KeyError("third"))
    assert not done.done()  # a failure does not cut the wait short
    second.set_lazy(lambda: (_ for _ in ()).throw(ValueError("second")), fails=True)
    assert not done.done()
    first.set_result(1)
    assert done.done() and done.failed()
    with pytest.raises(ValueError, match="second"):  # the first failed one, in order
        done.get(timeout=0)
    assert when_all([resolved(1), resolved(2)]).get(timeout=0) is None
    assert when_all([]).get(timeout=0) is None


def test_when_all_without_failures_ignores_them_and_can_settle_a_given_future():
    into: Future[None] = Future._pending()
    out = when_all([failed(KeyError("k")), resolved(1)], failures=False, into=into)
    assert out is into and out.get(timeout=0) is None


def test_when_all_counts_futures_settled_at_once_from_many_threads():
    futures = [Future._pending() for _ in range(200)]
    done = when_all(futures)
    go = threading.Barrier(8)

    def settle(part: list[Future[None]]) -> None:
        go.wait()
        for future in part:
            future.set_result(None)

    threads = [threading.Thread(target=settle, args=(futures[i::8],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert done.get(timeout=10) is None


def test_when_all_starts_a_coroutine_it_waits_for():
    @returns_future
    async def one() -> int:
        return 1

    assert when_all([one()]).get(timeout=10) is None
