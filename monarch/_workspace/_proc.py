"""Workspaces in a proc: synced trees on `sys.path`, changed modules reloaded.

At start, a proc puts every tree of `$MONARCH_WORKSPACE_DIR` at the front of `sys.path`. After
a sync, the controller calls the system method `workspace` of each live proc on the synced
hosts with the trees' directories and the files that changed; with `reload`, modules loaded
from those files are re-imported (`importlib.reload`), so the next call runs the new code.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
import traceback
from typing import Any

import msgpack

from .._runtime._process_runtime import ProcessRuntime
from .._wire import _serial
from .._wire._messages import ERROR, OK, Call


def startup_paths() -> None:
    """Puts this host's synced trees at the front of `sys.path` (proc start)."""
    root = os.environ.get("MONARCH_WORKSPACE_DIR")
    if not root or not os.path.isdir(root):
        return
    trees = sorted(e.path for e in os.scandir(root)
                   if e.is_dir() and not e.name.startswith("."))
    add_paths(trees)


def add_paths(dirs: list[str]) -> None:
    """Puts `dirs` at the front of `sys.path` (in order), once."""
    for path in reversed(dirs):
        if path in sys.path:
            sys.path.remove(path)
        sys.path.insert(0, path)
    importlib.invalidate_caches()


def reload_changed(changed: list[str]) -> list[str]:
    """Reloads the loaded modules whose file is one of `changed`; their names."""
    wanted = {os.path.realpath(p) for p in changed}
    reloaded = []
    for name, module in sorted(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if path and os.path.realpath(path) in wanted and os.path.exists(path):
            importlib.reload(module)
            reloaded.append(name)
    return reloaded


def install(runtime: ProcessRuntime) -> None:
    """Installs the system method `workspace` (body: dirs, changed, reload)."""
    def workspace(msg: Call, frames: list[Any]) -> None:
        body = msgpack.unpackb(frames[0].buffer, raw=False)
        # Off the loop: a reload imports (and may run module code for a while).
        threading.Thread(target=_update, args=(runtime, msg, body), daemon=True,
                         name="monarch-workspace").start()

    runtime.system_methods["workspace"] = workspace


def _update(runtime: ProcessRuntime, msg: Call, body: dict[str, Any]) -> None:
    payload: Any
    try:
        add_paths(body["dirs"])
        reloaded = reload_changed(body["changed"]) if body.get("reload") else []
        status, payload = OK, reloaded
    except BaseException as exc:  # noqa: BLE001 - the caller reports it
        status, payload = ERROR, (exc, traceback.format_exc())
    if msg.port is not None:
        data, buffers = _serial.dumps(payload)
        runtime.reply(msg.port, msg.lo, status, [data, *buffers])
