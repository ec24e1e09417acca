"""What importing a module does, seen from a fresh interpreter (the house rule: importing does
nothing; no thread, no socket, no environment read).

`what_importing_does("monarch.rdma")` runs a new Python that first imports `first` unwatched,
then puts spies on `threading.Thread.start`, `socket.socket.__init__`, `os.environ` and
`os.getenv` (reads by monarch's own modules), imports the modules, and reports what the spies saw and which top-level modules
ended up loaded.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from collections.abc import Iterable

_SPY = r"""
import importlib, json, os, socket, sys, threading
first, modules = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for name in first:
    importlib.import_module(name)
seen = {"threads": [], "sockets": [], "environment": []}
def read_by_monarch(what):
    frame = sys._getframe(2)  # the caller of the spy
    while frame is not None and frame.f_globals.get("__name__") in ("os", "_collections_abc"):
        frame = frame.f_back
    reader = frame.f_globals.get("__name__", "") if frame is not None else ""
    if reader.split(".")[0] == "monarch":
        seen["environment"].append(f"{reader}: {what}")
environ_type = type(os.environ)
for method in ("__getitem__", "get", "__contains__", "__iter__", "keys", "items", "copy"):
    def environ_spy(self, *args, _method=method, _original=getattr(environ_type, method)):
        read_by_monarch(f"environ.{_method}({', '.join(map(repr, args[:1]))})")
        return _original(self, *args)
    setattr(environ_type, method, environ_spy)
_getenv = os.getenv
os.getenv = lambda *a: (read_by_monarch(f"getenv({a[0]!r})"), _getenv(*a))[1]
_start = threading.Thread.start
threading.Thread.start = lambda self: (seen["threads"].append(self.name), _start(self))[1]
_socket_init = socket.socket.__init__
def socket_spy(self, *args, **kwargs):
    seen["sockets"].append(repr(args))
    _socket_init(self, *args, **kwargs)
socket.socket.__init__ = socket_spy
for name in modules:
    importlib.import_module(name)
seen["loaded"] = sorted({name.split(".")[0] for name in sys.modules})
sys.stdout.write(json.dumps(seen))
"""


@dataclasses.dataclass(frozen=True)
class ImportEffects:
    """What the spies saw while the modules were imported."""

    threads: list[str]
    """Names of the threads started."""
    sockets: list[str]
    """The arguments of each socket made."""
    environment: list[str]
    """Each read of the environment by monarch's own code, with the reader
    (`monarch.x: environ.get('HOME')`); libraries it imports may read theirs."""
    loaded: list[str]
    """Top-level names of every module loaded at the end (`torch` for `torch.nn`)."""

    def started_nothing(self) -> bool:
        return not self.threads and not self.sockets


def what_importing_does(*modules: str, first: Iterable[str] = ()) -> ImportEffects:
    """Imports `modules` in a fresh interpreter, after `first` (imported before the spies
    start), and says what that did."""
    out = subprocess.run([sys.executable, "-c", _SPY, json.dumps(list(first)),
                          json.dumps(list(modules))],
                         capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    return ImportEffects(**json.loads(out.stdout))
