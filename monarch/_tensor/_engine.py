"""The controller side of a tensor engine: one per proc mesh, made on its first `activate()`.

It spawns one `TensorWorker` actor per proc and turns the ops recorded on its meshes into
batches: consecutive ops for the same mesh are appended to one list, cast as one `execute`
broadcast to that mesh's workers (fire and forget: no round trip per op, the controller runs
ahead). A batch leaves when 1024 ops are waiting, when the next op is for another mesh, at every
sync point (fetch, leaving `activate()`), and at the latest 5 ms after its first op (a flusher
thread per engine sends it while the program does something else). Messages from one sender to
one actor are handled in send order, so each worker runs its ops in the order the program made
them; a fetch is a `call` after them.

Invariants: every remote tensor id (ref) is made here and used by one mesh's workers; a dropped
ref is freed by a DELETE in the next batch for that mesh, appended after every op using it.
Batches are taken from the buffer under `_lock` and sent under `_sending`, which is acquired
before `_lock` is released, so batches leave in the order they were taken.
"""

from __future__ import annotations

import collections
import itertools
import os
import secrets
import sys
import threading
import time
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import _disable_current_modes

from ..telemetry import process_recorder
from .._runtime import _context
from .._runtime._future import Future
from .._geometry._view import View
from ._ops import DELETE

MAX_OPS = 1024
MAX_AGE_S = 0.005
FRAMES_KEPT = 20_000  # controller tracebacks of the newest ops, for remote error reports
_HERE = os.path.dirname(os.path.abspath(__file__))
_TORCH: str = os.path.dirname(os.path.dirname(os.path.abspath(torch.__file__ or "")))


class Engine:
    """The tensor engine of one proc mesh: its workers, refs, batches and error context."""

    def __init__(self, proc_mesh: Any) -> None:
        from ._worker import TensorWorker

        self.id = secrets.token_hex(4)
        self.full: View = proc_mesh._full
        self.label = "tensor_engine"
        if any(not address.startswith("ipc://") for address in proc_mesh._table):
            raise NotImplementedError(
                "the tensor engine runs on procs of this host only (its process groups "
                "rendezvous through a file in the job's run directory)")
        from .._runtime._identity import current_process

        store = str(current_process().run_dir / f"tensor-engine-{self.id}.store")
        threads = max(1, (os.cpu_count() or 1) // len(self.full))
        full_procs = proc_mesh._with(self.full)
        self.workers = full_procs.spawn(self.label, TensorWorker, self.id, self.full.to_wire(),
                                        store, threads)
        self._store = store
        self._lock = threading.RLock()
        self._sending = threading.Lock()
        self._batch = 0  # the number of the batch being filled
        self._refs = itertools.count(1)
        self._seqs = itertools.count(1)
        self._ops: list[tuple] = []
        self._view: View | None = None
        self._since = 0.0
        # Appended from __del__ (any thread, any time): drained under the lock only.
        self._dropped: collections.deque[tuple[View, str, int]] = collections.deque()
        self._deferred: collections.deque[Callable[[], None]] = collections.deque()
        self._context: Any = None
        self._deletes: dict[View, dict[str, list[int]]] = {}
        self._frames: collections.OrderedDict[int, list[tuple[str, int, str]]] = \
            collections.OrderedDict()
        self._meshes: dict[View, Any] = {}
        self.batches_sent = 0
        self.ops_sent = 0
        self.refs_made = 0
        self.refs_dropped = 0  # (from `__del__`: counted, not locked; a gauge, not a ledger)
        self._metrics = process_recorder().metrics
        """Where the engine counts its ops, batches and live tensors (the console's :tensors,
        `monarch status`, SQL), labelled by its workers' actor mesh."""

    # -- ids ---------------------------------------------------------------------------------
    def new_ref(self) -> int:
        self.refs_made += 1
        return next(self._refs)

    def drop_ref(self, view: View, stream: str, ref: int) -> None:
        """Frees `ref` on the workers of `view` (in a later batch). Safe from `__del__`."""
        self.refs_dropped += 1
        self._dropped.append((view, stream, ref))

    # -- recording -----------------------------------------------------------------------------
    def next_seq(self) -> int:
        """A sequence number for a new op; remembers where the controller made it."""
        seq = next(self._seqs)
        self._remember_frames(seq)
        return seq

    def record(self, view: View, op: tuple) -> None:
        """Appends `op` for the workers of `view` (sending the batch when it is due)."""
        lock = self._lock
        lock.acquire()
        if self._view is not None and self._view != view:
            self._flush_locked()  # releases the lock
            lock.acquire()
        if self._deferred:
            self._run_deferred()
        ops = self._ops
        if not ops:
            self._view = view
            self._context = _context.context()
            self._since = time.monotonic()
            self._batch += 1
            _flusher.schedule(self, self._batch, self._since + MAX_AGE_S)
        ops.append(op)
        if len(ops) >= MAX_OPS:
            self._flush_locked()
        else:
            lock.release()

    def flush(self) -> None:
        """Sends what is waiting: the current batch, then every pending delete (a delete may
        follow an op of the current batch that uses the tensor: a to_mesh reads it)."""
        self._lock.acquire()
        if self._deferred:
            self._run_deferred()
        self._flush_locked()
        with self._lock:
            self._drain_dropped()
            for view in list(self._deletes):
                with self._sending:
                    self._send(view, self._take_deletes(view))

    def flush_batch(self, batch: int) -> None:
        """Sends batch number `batch` if it is still the one being filled (the flusher's
        call when the batch is MAX_AGE_S old)."""
        self._lock.acquire()
        if self._batch == batch and self._ops:
            self._flush_locked()
        else:
            self._lock.release()

    def _flush_locked(self) -> None:
        """Takes the current batch and sends it; called with `_lock` held, returns without."""
        ops, view, context = self._ops, self._view, self._context
        self._ops, self._view = [], None
        if ops and view is not None:
            self._drain_dropped()
            ops.extend(self._take_deletes(view))
        self._sending.acquire()
        self._lock.release()
        try:
            if ops and view is not None:
                token = _context.enter(context)  # sent as the actor that recorded the ops
                try:
                    self._send(view, ops)
                finally:
                    _context.leave(token)
        finally:
            self._sending.release()

    def defer(self, action: Callable[[], None]) -> None:
        """Runs `action` (which records ops) at the next record or flush: for `__del__`
        methods, which may run in the middle of a send."""
        self._deferred.append(action)

    def _run_deferred(self) -> None:
        while self._deferred:
            self._deferred.popleft()()

    def _send(self, view: View, ops: list[tuple]) -> None:
        if not ops:
            return
        self.batches_sent += 1
        self.ops_sent += len(ops)
        metrics, mesh = self._metrics, self.workers._mesh_id
        metrics.inc(("tensor_engine_ops", mesh), len(ops))
        metrics.inc(("tensor_engine_batches", mesh))
        metrics.set(("tensor_engine_tensors", mesh), self.refs_made - self.refs_dropped)
        with _disable_current_modes():  # pickling a shipped constant runs torch ops, locally
            self.mesh_for(view).execute.broadcast(view.to_wire(), ops)

    def _drain_dropped(self) -> None:
        dropped = self._dropped
        while dropped:
            view, stream, ref = dropped.popleft()
            self._deletes.setdefault(view, {}).setdefault(stream, []).append(ref)

    def _take_deletes(self, view: View) -> list[tuple]:
        streams = self._deletes.pop(view, None)
        if not streams:
            return []
        return [(DELETE, 0, stream, refs) for stream, refs in streams.items()]

    def mesh_for(self, view: View) -> Any:
        """The workers of `view`, as an actor mesh slice."""
        mesh = self._meshes.get(view)
        if mesh is None:
            mesh = self._meshes[view] = self.workers._with(view)
        return mesh

    # -- reading ---------------------------------------------------------------------------------
    def fetch(self, view: View, refs: list[int], streams: list[str], chosen: int) -> Future[Any]:
        """A future of the workers' answers: `chosen` (a base rank) returns the values of
        `refs`, every worker of `view` the first failure among them (see TensorWorker.fetch)."""
        self.flush()
        return self.mesh_for(view).fetch.call(refs, streams, chosen)

    def call_rank(self, rank: int, method: str, *args: Any) -> Future[Any]:
        """Calls a worker endpoint on the proc of base rank `rank`, after everything recorded
        so far."""
        self.flush()
        one = self.workers._with(View((), (), (), rank))
        return getattr(one, method).call_one(*args)

    # -- error context ---------------------------------------------------------------------------
    def _remember_frames(self, seq: int) -> None:
        frames: list[tuple[str, int, str]] = []
        f = sys._getframe(1)
        internal = _internal
        while f is not None and len(frames) < 12:
            code = f.f_code
            hidden = internal.get(code)
            if hidden is None:
                name = code.co_filename
                hidden = internal[code] = name.startswith(_HERE) or name.startswith(_TORCH)
            if not hidden:
                frames.append((code.co_filename, f.f_lineno, code.co_name))
            f = f.f_back  # type: ignore[assignment]
        self._frames[seq] = frames
        if len(self._frames) > FRAMES_KEPT:
            self._frames.popitem(last=False)

    def frames_of(self, seq: int) -> list[tuple[str, int, str]]:
        """Where the op `seq` was made in the controller (innermost first), if still kept."""
        return self._frames.get(seq, [])

    def statistics(self) -> dict[str, int]:
        """Batches and ops sent so far."""
        return {"batches": self.batches_sent, "ops": self.ops_sent}


class _Flusher:
    """One thread for every engine: sends each batch MAX_AGE_S after its first op, so the
    workers get work while the program does something else (started on first use)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: collections.deque[tuple[float, Engine, int]] = collections.deque()
        self._thread: threading.Thread | None = None

    def schedule(self, engine: Engine, batch: int, deadline: float) -> None:
        with self._cond:
            was_idle = not self._due
            # Deadlines are now + MAX_AGE_S: a new one is never due before the others.
            self._due.append((deadline, engine, batch))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="tensor engine flusher",
                                                daemon=True)
                self._thread.start()
            elif was_idle:
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._due:
                    self._cond.wait()
                deadline, engine, batch = self._due[0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._cond.wait(delay)
                    continue
                self._due.popleft()
            engine.flush_batch(batch)


_flusher = _Flusher()
# code object -> whether its frames are ours or torch's (left out of controller tracebacks)
_internal: dict[Any, bool] = {}
_engines: dict[str, Engine] = {}
_engines_lock = threading.Lock()


def engine_of(proc_mesh: Any) -> Engine:
    """The engine of `proc_mesh`'s procs (made, and its workers spawned, on first use)."""
    with _engines_lock:
        engine = _engines.get(proc_mesh._procs)
        if engine is None:
            engine = _engines[proc_mesh._procs] = Engine(proc_mesh)
        return engine
