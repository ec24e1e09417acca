"""The shape of the code: import directions, a frozen public API, importing does nothing."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import monarch.actor

ROOT = Path(__file__).resolve().parent.parent

MONARCH_ACTOR_ALL = sorted([
    "Accumulator", "Actor", "ActorError", "Channel", "ChannelTransport", "Context", "Endpoint",
    "Extent", "Future", "HostMesh", "MeshFailure", "Point", "Port", "PortReceiver", "ProcId",
    "ProcMesh", "Uid", "ValueMesh", "as_endpoint", "attach", "attach_to_workers",
    "concurrent_endpoint", "config", "context", "current_actor_name", "current_rank",
    "current_size", "debug_controller", "default_bootstrap_cmd", "enable_transport", "endpoint",
    "get_meter", "get_or_spawn_controller", "returns_future", "run_worker_loop_forever",
    "run_worker_loop_until_shutdown", "send", "shutdown_context", "span",
    "start_worker_loop_forever", "this_host", "this_proc", "traced", "unhandled_fault_hook",
    "SupervisionError",
])


def test_monarch_actor_all_is_frozen():
    assert sorted(monarch.actor.__all__) == MONARCH_ACTOR_ALL
    for name in monarch.actor.__all__:
        assert getattr(monarch.actor, name) is not None


def imports_of(path: Path) -> set[str]:
    """Absolute module names a file imports (relative imports resolved)."""
    tree = ast.parse(path.read_text())
    rel = path.relative_to(ROOT).with_suffix("")
    package = ["monarch", *{"telemetry": ["telemetry"], "console": ["console"],
                            "cli": ["cli"]}.get(rel.parts[0], [])]
    parts = list(rel.parts)
    if parts[0] == "monarch":
        package = parts[:-1]
    else:
        package = ["monarch", *parts[:-1]]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def files(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def test_telemetry_imports_nothing_of_monarch():
    for path in files("telemetry"):
        bad = {m for m in imports_of(path) if m.startswith("monarch")
               and not m.startswith("monarch.telemetry")}
        assert not bad, f"{path} imports {bad}"


def test_monarch_never_imports_textual_or_typer():
    for path in files("monarch"):
        bad = {m for m in imports_of(path) if m.split(".")[0] in ("textual", "typer")}
        assert not bad, f"{path} imports {bad}"


def test_wire_knows_nothing_of_meshes_or_futures():
    for path in files("monarch/_wire"):
        bad = {m for m in imports_of(path) if m.startswith("monarch.")
               and not m.startswith("monarch._wire")}
        assert not bad, f"{path} imports {bad}"


def test_proc_side_never_imports_the_controller_side():
    proc_side = [ROOT / "monarch" / "_proc_main.py", ROOT / "monarch" / "_hosting.py",
                 ROOT / "monarch" / "_process.py", ROOT / "monarch" / "actor.py",
                 *files("monarch/_host")]
    for path in proc_side:
        bad = {m for m in imports_of(path) if m.startswith("monarch._controller")}
        assert not bad, f"{path} imports {bad}"


def test_importing_starts_nothing():
    code = (
        "import threading, socket, json, os\n"
        "opened = []\n"
        "real = socket.socket.__init__\n"
        "def spy(self, *a, **k):\n"
        "    opened.append(a)\n"
        "    real(self, *a, **k)\n"
        "socket.socket.__init__ = spy\n"
        "before = threading.active_count()\n"
        "import monarch, monarch.actor, monarch.config, monarch.telemetry\n"
        "print(json.dumps({'threads': threading.active_count() - before,"
        " 'sockets': len(opened), 'torch': 'torch' in __import__('sys').modules,"
        " 'otel': 'opentelemetry' in __import__('sys').modules}))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout) == {"threads": 0, "sockets": 0, "torch": False,
                                      "otel": False}


def test_monarch_and_telemetry_type_check():
    out = subprocess.run([sys.executable, "-m", "mypy", "monarch", "telemetry"], cwd=ROOT,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:]
