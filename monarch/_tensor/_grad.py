"""`monarch.grad_generator`: gradients yielded one by one, as soon as backward makes each.

    grads = monarch.grad_generator(loss, reversed_params)
    for param, grad in zip(reversed_params, grads):
        grad.reduce_("dp", "sum")      # recorded while backward goes on with earlier layers
        param -= lr * grad

Backward on remote tensors only records ops, so it is fast here; what matters is the order in
which the workers receive them: interleaving each gradient's reduce with the rest of backward
lets communication start before backward ends. The generator runs `torch.autograd.grad` on a
helper thread in lockstep with the consumer: a hook on each tensor asked for hands its gradient
over and waits until the consumer asks for the next one (only one of the two threads runs at a
time). Gradients come in the order of `with_respect_to`; one not reached yet waits for
backward to get there; one that does not depend on the roots is None.
"""

from __future__ import annotations

import threading
from typing import Any, Sequence

import torch


class GradientGenerator:
    """An iterator of the gradients of `roots` with respect to each of `with_respect_to`."""

    def __init__(self, roots: list[torch.Tensor], with_respect_to: list[torch.Tensor],
                 grad_roots: list[torch.Tensor | None]) -> None:
        self._roots = roots
        self._wrt = with_respect_to
        self._grad_roots = grad_roots or None
        self._ready: dict[int, torch.Tensor | None] = {}
        self._next = 0
        self._done = False
        self._closing = False
        self._error: BaseException | None = None
        self._to_consumer = threading.Semaphore(0)
        self._to_engine = threading.Semaphore(0)
        self._thread: threading.Thread | None = None

    def __iter__(self) -> "GradientGenerator":
        return self

    def __next__(self) -> torch.Tensor | None:
        if self._next >= len(self._wrt):
            self._finish()
            raise StopIteration
        index = self._next
        while index not in self._ready and not self._done:
            self._step()
        if self._error is not None:
            raise self._error
        self._next += 1
        grad = self._ready.pop(index, None)
        if self._next == len(self._wrt):
            self._finish()  # the rest of backward runs now, without handing anything over
        return grad

    def _step(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._backward, name="grad_generator",
                                            daemon=True)
            self._thread.start()
        else:
            self._to_engine.release()
        self._to_consumer.acquire()

    def _finish(self) -> None:
        self._closing = True
        while self._thread is not None and not self._done:
            self._step()

    def close(self) -> None:
        """Lets backward run to its end without waiting for the consumer."""
        self._finish()

    def _backward(self) -> None:
        from ._mesh import _dispatching

        handles = [t.register_hook(self._hook(i)) for i, t in enumerate(self._wrt)]
        try:
            with _dispatching():
                torch.autograd.grad(self._roots, self._wrt, grad_outputs=self._grad_roots,
                                    allow_unused=True)
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._error = exc
        finally:
            for handle in handles:
                handle.remove()
            self._done = True
            self._to_consumer.release()

    def _hook(self, index: int) -> Any:
        def hook(grad: torch.Tensor) -> None:
            if threading.current_thread() is not self._thread:
                return  # another backward through the same tensors: not ours
            self._ready[index] = grad
            if not self._closing:
                self._to_consumer.release()
                self._to_engine.acquire()

        return hook


def grad_generator(roots: torch.Tensor | Sequence[torch.Tensor] = (),
                   with_respect_to: Sequence[torch.Tensor] = (),
                   grad_roots: Sequence[torch.Tensor | None] = ()) -> GradientGenerator:
    """Gradients of `roots` (a tensor or several, seeded with `grad_roots`) with respect to
    each tensor of `with_respect_to`, yielded in that order as backward makes them."""
    if isinstance(roots, torch.Tensor):
        roots = [roots]
    return GradientGenerator(list(roots), list(with_respect_to), list(grad_roots))
