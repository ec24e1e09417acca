"""Monarch's private module names, mapped onto pymonarch's public objects (test harness only).

torchmonarch 0.7.0's own tests import names from its private tree (`monarch._src.actor...`,
`monarch._rust_bindings...`). pymonarch has no such tree and never will: this finder, installed
in every process of a conformance run (by `sitecustomize`), answers those imports with modules
whose attributes are our public objects. A name with no counterpart (a piece of Monarch's Rust
runtime) imports as a `RustOnly` placeholder, so a test file still loads; a test that *uses* one
fails loudly, and is listed in `tests/conformance/excluded.txt` with the reason.

Only names that do not exist for real are answered: the finder runs after the normal ones.
"""

from __future__ import annotations

import enum
import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from typing import Any

PREFIXES = ("monarch._src", "monarch._rust_bindings", "monarch.tools", "monarch.python",
            "monarch._testing", "monarch.distributed_telemetry")

# private module -> {name: "public.module:attribute"}; "*": every public name of a module
ALIASES: dict[str, dict[str, str]] = {
    "monarch._src.actor.actor_mesh": {
        "Actor": "monarch.actor:Actor", "ActorMesh": "monarch.actor:ActorMesh",
        "ActorError": "monarch.actor:ActorError", "Channel": "monarch.actor:Channel",
        "Port": "monarch.actor:Port", "PortReceiver": "monarch.actor:PortReceiver",
        "ValueMesh": "monarch.actor:ValueMesh", "context": "monarch.actor:context",
        "current_rank": "monarch.actor:current_rank", "current_size": "monarch.actor:current_size",
        "current_actor_name": "monarch.actor:current_actor_name",
        "shutdown_context": "monarch.actor:shutdown_context", "attach": "monarch.actor:attach",
        "Accumulator": "monarch.actor:Accumulator", "send": "monarch.actor:send",
        "as_endpoint": "monarch.actor:as_endpoint", "Point": "monarch.actor:Point",
        "Extent": "monarch.actor:Extent", "MeshFailure": "monarch.actor:MeshFailure",
    },
    "monarch._src.actor.actor": {"Actor": "monarch.actor:Actor"},
    "monarch._src.actor.future": {"Future": "_monarch_private:Future"},
    "monarch._src.actor.endpoint": {
        "endpoint": "monarch.actor:endpoint", "Endpoint": "monarch.actor:Endpoint",
        "concurrent_endpoint": "monarch.actor:concurrent_endpoint",
    },
    "monarch._src.actor.concurrent": {
        "concurrent_endpoint": "monarch.actor:concurrent_endpoint"},
    "monarch._src.actor.returns_future": {"returns_future": "monarch.actor:returns_future"},
    "monarch._src.actor.host_mesh": {
        "HostMesh": "monarch.actor:HostMesh", "this_host": "monarch.actor:this_host",
        "this_proc": "monarch.actor:this_proc",
        "default_bootstrap_cmd": "monarch.actor:default_bootstrap_cmd",
    },
    "monarch._src.actor.proc_mesh": {
        "ProcMesh": "monarch.actor:ProcMesh",
        "get_or_spawn_controller": "monarch.actor:get_or_spawn_controller",
    },
    "monarch._src.actor.bootstrap": {
        "attach_to_workers": "monarch.actor:attach_to_workers",
        "run_worker_loop_forever": "monarch.actor:run_worker_loop_forever",
        "start_worker_loop_forever": "monarch.actor:start_worker_loop_forever",
    },
    "monarch._src.actor.supervision": {"MeshFailure": "monarch.actor:MeshFailure"},
    "monarch._rust_bindings.monarch_hyperactor.supervision": {
        "SupervisionError": "monarch.actor:SupervisionError",
        "MeshFailure": "monarch.actor:MeshFailure",
    },
    "monarch._rust_bindings.monarch_hyperactor.proc": {
        "ProcId": "monarch.actor:ProcId", "Uid": "monarch.actor:Uid",
    },
    "monarch._rust_bindings.monarch_hyperactor.shape": {
        "Point": "monarch.actor:Point", "Extent": "monarch.actor:Extent",
    },
    "monarch._rust_bindings.monarch_hyperactor.channel": {
        "ChannelTransport": "monarch.actor:ChannelTransport",
    },
    "monarch._rust_bindings.monarch_hyperactor.host_mesh": {
        "HostMesh": "monarch.actor:HostMesh",
        "BootstrapCommand": "monarch.actor:BootstrapCommand",
    },
    "monarch._src.job.process": {"ProcessJob": "monarch.job:ProcessJob"},
    "monarch._src.job.job": {
        "JobTrait": "monarch.job:JobTrait", "JobState": "monarch.job:JobState",
        "LocalJob": "monarch.job:LocalJob", "ProcessState": "monarch.job:ProcessState",
        "job_load": "monarch.job:job_load", "job_loads": "monarch.job:job_loads",
        "exec_command": "monarch.job:exec_command",
        "TelemetryConfig": "monarch.job:TelemetryConfig",
        "MeshAdminConfig": "monarch.job:MeshAdminConfig",
    },
    "monarch._src.job.slurm": {"SlurmJob": "monarch.job:SlurmJob"},
    # the debugger's command language: our parser's values, and its entry as Monarch calls it
    "monarch._src.actor.debugger.debug_command": {
        **{name: f"monarch._actors._debug_commands:{name}" for name in (
            "Attach", "Cast", "Continue", "Help", "ListCommand", "Quit")},
        "DebugCommand": "_monarch_private:DebugCommand",
    },
    # Monarch's Rust helper that builds a value mesh from labels, sizes and values: ours, built
    # through ValueMesh's public constructor
    "monarch._rust_bindings.monarch_hyperactor.value_mesh": {
        "_make_test_value_mesh": "_monarch_private:make_value_mesh"},
    "monarch._src.actor.debugger.debug_io": {"DebugStdIO": "_monarch_private:DebugStdIO"},
    # Monarch's private rule for an actor's kind (SA-5), answered by ours (harness only)
    "monarch._src.actor.actor_mesh#harness": {},
}
ALIASES["monarch._src.actor.actor_mesh"].update({
    "_actor_kind": "_monarch_private:actor_kind", "ActorKind": "_monarch_private:ActorKind",
})
del ALIASES["monarch._src.actor.actor_mesh#harness"]

# private module -> a module of ours whose attributes it is (a whole module aliased)
MODULES: dict[str, str] = {
    "monarch.python.tests": "",  # Monarch's in-repo path of its tests folder: its modules
}


def _future_adapter() -> Any:
    """Monarch's Future as its tests name it: ours (its `_from_coro(coro)`, the coroutine-backed
    future Monarch's tests build, is our runtime's own constructor), under Monarch's name."""
    from monarch.actor import Future as Ours

    class SameAsOurs(type):
        def __instancecheck__(cls, obj: Any) -> bool:  # our futures are Monarch's Futures
            return isinstance(obj, Ours)

    class Future(Ours, metaclass=SameAsOurs):  # type: ignore[misc, valid-type]
        __slots__ = ()

        def __class_getitem__(cls, item: Any) -> Any:  # `Future[bool]` in annotations
            return Ours[item]

    # importable by name, so that pickles (cloudpickle's, of isolated tests) refer to it
    Future.__module__, Future.__qualname__ = __name__, "Future"
    globals()["Future"] = Future
    return Future


def __getattr__(name: str) -> Any:
    if name == "Future":  # built on first use: importing this module imports no monarch
        return _future_adapter()
    raise AttributeError(name)


def make_value_mesh(labels: list[str], sizes: list[int], values: list[Any]) -> Any:
    """A value mesh of `values` over dimensions `labels` of `sizes` (row-major)."""
    from monarch.actor import Extent, ValueMesh

    return ValueMesh(Extent(labels, sizes), values)


class DebugStdIO:
    """Monarch's debugger console on stdin/stdout, as far as its parser uses one."""

    async def output(self, text: str) -> None:
        sys.stdout.write(text)


class DebugCommand:
    """Monarch's `DebugCommand.parse(io, line)`: our parser, a refused line written to `io`
    and answered None, as Monarch's does."""

    @staticmethod
    async def parse(debug_io: DebugStdIO, line: str) -> Any:
        from monarch._actors._debug_commands import DebugCommandError, parse_command

        try:
            return parse_command(line)
        except DebugCommandError as exc:
            await debug_io.output(f"Error parsing input: {exc}\n")
            return None


class ActorKind(enum.Enum):
    """Monarch's two kinds of actors (its private `ActorKind`)."""

    SYNC = "sync"
    ASYNC = "async"


def actor_kind(cls: type) -> ActorKind:
    """Monarch's private `_actor_kind`, answered by pymonarch's own rule (and its errors)."""
    from monarch._actors._endpoint import check_sync_async

    return ActorKind.ASYNC if check_sync_async(cls) else ActorKind.SYNC


class RustOnly:
    """Stands for a piece of Monarch's Rust runtime that pymonarch has no counterpart of: it
    imports, and fails at first use."""

    def __init__(self, path: str) -> None:
        self._path = path

    def _fail(self) -> Exception:
        return NotImplementedError(f"{self._path} is part of Monarch's Rust runtime, which "
                                   "pymonarch has no counterpart of (conformance harness)")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        raise self._fail()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return RustOnly(f"{self._path}.{name}")

    def __mro_entries__(self, bases: tuple) -> tuple:
        return (_RustOnlyBase,)

    def __getitem__(self, item: Any) -> Any:
        return self

    def __repr__(self) -> str:
        return f"<RustOnly {self._path}>"


class _RustOnlyBase:
    """The base of a class a test derives from a `RustOnly` name: defining it works."""


def _resolve(target: str) -> Any:
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


def _lookup(module: types.ModuleType, name: str) -> Any:
    """A missing attribute of an alias module (PEP 562 `__getattr__`)."""
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    full = f"{module.__name__}.{name}"
    if module.__name__ in MODULES:
        value = importlib.import_module(f"{MODULES[module.__name__]}{name}".lstrip("."))
    elif name in ALIASES.get(module.__name__, {}):
        value = _resolve(ALIASES[module.__name__][name])
    elif any(known.startswith(full + ".") or known == full for known in ALIASES):
        value = importlib.import_module(full)
    else:
        value = RustOnly(full)
    setattr(module, name, value)
    return value


class _Loader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        # A plain module (cloudpickle pickles those by reference) with a PEP 562 __getattr__.
        module = types.ModuleType(spec.name)
        module.__path__ = []  # a package: its submodules import through this finder too
        module.__getattr__ = lambda name: _lookup(module, name)  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class PrivateNames(importlib.abc.MetaPathFinder):
    """Answers imports of Monarch's private module names that do not exist for real."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        if fullname.startswith(PREFIXES) or fullname in ALIASES:
            return importlib.machinery.ModuleSpec(fullname, _Loader(), is_package=True)
        return None


def install() -> None:
    """Appends the finder (after the real ones) unless it is there already."""
    if not any(isinstance(f, PrivateNames) for f in sys.meta_path):
        sys.meta_path.append(PrivateNames())
