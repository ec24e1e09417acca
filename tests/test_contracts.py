"""The shape of the code: import directions, a frozen public API, importing does nothing."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import monarch.actor

from import_graph import cycles, graph, module_files, raw_imports, reachable
from importing import what_importing_does

ROOT = Path(__file__).resolve().parent.parent

MONARCH_ACTOR_ALL = sorted([
    "Accumulator", "Actor", "ActorError", "BootstrapCommand", "Channel", "ChannelTransport",
    "Context", "Endpoint", "Extent", "Future", "HostMesh", "MeshFailure", "Point", "Port", "PortReceiver", "ProcId",
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
    """Absolute dotted names a file imports, wherever the import stands."""
    names = {path: name for name, path in module_files().items()}
    return raw_imports(names[path], path)


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


def is_controller(module: str) -> bool:
    return module == "monarch._controller" or module.startswith("monarch._controller.")


def test_no_import_cycle_through_the_controller():
    """The runtime (all the controller imports, directly or not) never imports the controller:
    the job starts through a seam the public surface registers (`monarch._controller._start`)."""
    through = [c for c in cycles(graph()) if any(is_controller(m) for m in c)]
    assert not through, f"import cycles through monarch._controller: {through}"


def test_proc_side_never_imports_the_controller_side():
    edges = graph()
    for start in ("monarch._proc._main", "monarch._proc._zygote", "monarch._host._agent",
                  "monarch._host.worker"):
        bad = sorted(m for m in reachable(edges, start) if is_controller(m))
        assert not bad, f"{start} imports {bad}"


PUBLIC = {"actor", "admin", "job", "mesh_controller", "rdma", "service", "spmd", "tensor_engine",
          "weights", "tools"}


def room(module: str) -> str | None:
    """The room (docs/DESIGN.md) a module of ours belongs to: its folder under `monarch/`,
    `public` for the public surface, `config`, `telemetry`, `console`, `cli`."""
    parts = module.split(".")
    if parts[0] != "monarch":
        return None
    if len(parts) == 1 or parts[1] in PUBLIC:
        return "public"
    if parts[1] == "_proc_boot":
        return "_proc"
    return parts[1]


ROOMS: dict[str, set[str]] = {
    # room: the rooms it may import (the order of DESIGN's room table, bottom up)
    "config": set(),
    "telemetry": set(),
    "_geometry": set(),
    "_wire": {"telemetry"},
    "_runtime": {"config", "telemetry", "_wire", "_geometry"},
    "_host": {"config", "telemetry", "_wire", "_runtime"},
    "_rdma": {"config", "telemetry", "_wire", "_runtime"},
    "_actors": {"config", "telemetry", "_wire", "_geometry", "_runtime"},
    "_rl": {"config", "telemetry", "_runtime", "_actors"},
    "_tensor": {"config", "telemetry", "_geometry", "_runtime", "_actors"},
    "_workspace": {"config", "_wire", "_geometry", "_runtime", "_rdma", "_actors"},
    "_mesh": {"config", "telemetry", "_wire", "_geometry", "_runtime", "_host", "_actors",
              "_tensor", "_workspace"},
    "_proc": {"config", "telemetry", "_wire", "_geometry", "_runtime", "_host", "_actors",
              "_mesh", "_workspace"},
    "_client": {"config", "telemetry", "_geometry", "_runtime"},
    "_history": {"config", "telemetry", "_wire", "_runtime", "_client"},
    "_controller": {"config", "telemetry", "_wire", "_geometry", "_runtime", "_host", "_rdma",
                    "_actors", "_mesh", "_history"},
    "_jobs": {"config", "telemetry", "_runtime", "_actors", "_controller", "_client"},
    "public": {"config", "telemetry", "_geometry", "_runtime", "_host", "_rdma", "_actors", "_rl",
               "_tensor", "_mesh", "_history", "_controller", "_jobs", "_client"},
    "console": {"config", "telemetry", "_runtime", "_history", "public"},
    "cli": {"config", "telemetry", "_actors", "_history", "_jobs", "public", "console"},
}
"""What each room may import. Past the last word of issue #31, `KNOWN` lists what still breaks
it; the test fails on anything else, and on an entry of `KNOWN` that no longer happens."""

KNOWN: set[tuple[str, str]] = set()
"""Room edges still to remove (none now; kept for the next one found, with its issue)."""

KNOWN_CYCLES: list[list[str]] = []
"""Module cycles still to remove (none now; kept for the next one found, with its issue)."""


def test_rooms_import_one_way():
    edges = graph()
    found: set[tuple[str, str]] = set()
    for module, targets in edges.items():
        for target in targets:
            a, b = room(module), room(target)
            if a and b and a != b:
                assert a in ROOMS, f"{module}: room {a} is not in ROOMS (docs/DESIGN.md)"
                if b not in ROOMS[a]:
                    found.add((a, b))
                    assert (a, b) in KNOWN, f"{module} ({a}) imports {target} ({b})"
    assert found == KNOWN, f"no longer found, remove from KNOWN: {KNOWN - found}"


def test_the_rooms_rules_run_one_way():
    """ROOMS itself has no cycle: the rooms form layers."""
    rule_edges = {a: set(b) for a, b in ROOMS.items()}
    assert cycles(rule_edges) == []


def test_no_import_cycle_but_the_known_ones():
    assert cycles(graph()) == KNOWN_CYCLES


def test_the_import_graph_sees_lazy_and_importlib_imports(tmp_path):
    """The checks above can fail: a cycle made by a function-level import and an importlib call
    is found."""
    (tmp_path / "monarch" / "_controller").mkdir(parents=True)
    for folder in ("telemetry", "console", "cli"):
        (tmp_path / folder).mkdir()
    (tmp_path / "monarch" / "__init__.py").write_text("")
    (tmp_path / "monarch" / "_controller" / "__init__.py").write_text("")
    (tmp_path / "monarch" / "_controller" / "_job.py").write_text("from .. import _context\n")
    (tmp_path / "monarch" / "_context.py").write_text(
        "import importlib\n"
        "def root():\n"
        "    importlib.import_module('monarch._controller._job')\n")
    (tmp_path / "monarch" / "_other.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from . import _typed\n"
        "def f():\n    from ._controller import _job\n")
    (tmp_path / "monarch" / "_typed.py").write_text("from . import _other\n")
    edges = graph(tmp_path)
    # its own package `monarch` is being imported when it runs: no edge to it
    assert edges["monarch._context"] == {"monarch._controller", "monarch._controller._job"}
    assert "monarch._controller._job" in edges["monarch._other"]
    # an import only a type checker reads never runs: no edge, so no cycle with _typed
    assert "monarch._typed" not in edges["monarch._other"]
    assert cycles(edges) == [["monarch._context", "monarch._controller._job"]]


def test_importing_starts_nothing():
    """The public surface and telemetry start no thread, open no socket, read no environment
    and load neither torch nor OpenTelemetry when imported (tests/importing.py's spies)."""
    effects = what_importing_does("monarch", "monarch.actor", "monarch.config",
                                  "monarch.telemetry", "monarch.job", "monarch.admin")
    assert effects.started_nothing(), effects
    assert effects.environment == [], effects.environment
    assert "torch" not in effects.loaded and "opentelemetry" not in effects.loaded


def test_monarch_telemetry_console_and_cli_type_check():
    out = subprocess.run([sys.executable, "-m", "mypy", "monarch", "telemetry", "console", "cli"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-4000:]


def sleeps_in_test_bodies(source: str, filename: str = "<test>") -> list[str]:
    """`time.sleep(...)`, `asyncio.sleep(x)` with x != 0 and `pilot.pause(x)` called in the
    body of a `test_*` function (nested functions included): a sleep then an assertion races
    the machine. A line may say why it must sleep with a `# sleep-ok: <reason>` comment."""
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source, filename)):
        if not (isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                and node.name.startswith("test_")):
            continue
        for call in ast.walk(node):
            if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Attribute)):
                continue
            owner = call.func.value
            name = f"{owner.id}.{call.func.attr}" if isinstance(owner, ast.Name) else ""
            zero = bool(call.args) and isinstance(call.args[0], ast.Constant) \
                and call.args[0].value == 0
            if (name == "time.sleep" or (name == "asyncio.sleep" and not zero)
                    or (call.func.attr == "pause" and call.args)) \
                    and "# sleep-ok:" not in lines[call.lineno - 1]:
                found.append(f"{filename}:{call.lineno} {node.name}: {name or call.func.attr}")
    return found


def test_no_sleep_in_test_bodies():
    found = []
    for path in sorted((ROOT / "tests").rglob("*.py")):
        found += sleeps_in_test_bodies(path.read_text(), str(path.relative_to(ROOT)))
    assert not found, "wait on the event (tests/waiting.py), not a sleep:\n" + "\n".join(found)


def test_the_sleep_check_can_fail():
    source = ("import time, asyncio\n"
              "def helper():\n    time.sleep(1)\n"
              "def test_a():\n    time.sleep(0.2)\n    assert True\n"
              "async def test_b(pilot):\n    await asyncio.sleep(0)\n"
              "    await pilot.pause(0.3)\n    await asyncio.sleep(1)\n"
              "def test_c():\n    time.sleep(1)  # sleep-ok: a measurement window\n")
    assert sleeps_in_test_bodies(source) == [
        "<test>:5 test_a: time.sleep", "<test>:9 test_b: pilot.pause", "<test>:10 test_b: asyncio.sleep"]


def test_property_tests_have_no_time_limit():
    """Hypothesis's per-example deadline is a timed assertion: off for every property test."""
    from hypothesis import HealthCheck, settings

    assert settings.default.deadline is None
    assert HealthCheck.too_slow in settings.default.suppress_health_check
    timed = [f"{path.relative_to(ROOT)}:{n}"
             for path in sorted((ROOT / "tests").rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "settings(" in line and "deadline=" in line and "deadline=None" not in line
             and path.name != "conftest.py"]
    assert not timed, timed


def test_a_skipped_test_fails_under_ci(tmp_path):
    """`CI=true` (set by `.ci/run`) turns skips, in a test or a whole module, into failures."""
    import shutil

    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_peer.py").write_text(
        "import pytest\n\ndef test_needs_a_peer():\n    pytest.skip('the peer is missing')\n")
    (tmp_path / "test_module.py").write_text(
        "import pytest\npytest.importorskip('no_such_peer_module')\n\ndef test_x():\n    pass\n")
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)]
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    locally = subprocess.run(run, capture_output=True, text=True, timeout=120, env=env,
                             cwd=tmp_path)
    assert locally.returncode == 0 and "2 skipped" in locally.stdout, locally.stdout
    in_ci = subprocess.run(run, capture_output=True, text=True, timeout=120,
                           env=dict(env, CI="true"), cwd=tmp_path)
    assert in_ci.returncode != 0, in_ci.stdout
    assert in_ci.stdout.count("counts as a failure") >= 2, in_ci.stdout


def test_a_session_that_leaves_files_behind_fails(tmp_path):
    """tests/conftest.py gives a session its own temp directory, and fails the session when
    something is left in it."""
    import re
    import shutil

    shutil.copy(ROOT / "tests" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_leak.py").write_text(
        "import tempfile\n\ndef test_leaks():\n"
        "    tempfile.mkdtemp(prefix='leaktest-')\n")
    (tmp_path / "test_clean.py").write_text(
        "import tempfile\n\ndef test_cleans():\n"
        "    with tempfile.TemporaryDirectory():\n        pass\n")
    env = {k: v for k, v in os.environ.items() if k != "MONARCH_TEST_TMP_OWNER"}
    run = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
    clean = subprocess.run([*run, str(tmp_path / "test_clean.py")], capture_output=True,
                           text=True, timeout=120, cwd=tmp_path, env=env)
    assert clean.returncode == 0, clean.stdout
    leak = subprocess.run([*run, str(tmp_path / "test_leak.py")], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path, env=env)
    kept = re.search(r"the session's temp directory is kept: (\S+)", leak.stdout)
    try:
        assert leak.returncode == 1, leak.stdout
        assert re.search(r"the test session left files behind in \S+: \['leaktest-\w+'\]",
                         leak.stdout), leak.stdout
    finally:
        if kept:
            shutil.rmtree(kept.group(1), ignore_errors=True)
