"""`MONARCH_TELEMETRY=0` turns spans and metrics off in every process; logs still arrive."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = textwrap.dedent('''
    import json, threading
    from monarch.actor import Actor, endpoint, this_host
    from monarch._controller._job import current_job

    class A(Actor):
        @endpoint
        def ping(self, i):
            return i

        @endpoint
        def mark(self):
            print("telemetry-switch-marker", flush=True)

    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("switch", A)
    for i in range(5):
        mesh.ping.call(i).get(timeout=60)
    mesh.mark.call().get(timeout=60)
    store = current_job().store
    # A stop drains every proc's last records (lines ship at once, the rest with the bulk:
    # a line may reach the store before the spans recorded before it)
    procs.stop().get(timeout=30)
    flushed = threading.Event()  # the controller's own records: drained on its I/O loop
    runtime = current_job().runtime
    runtime.call_soon(lambda: (runtime.flush_telemetry(), flushed.set()))
    assert flushed.wait(60)
    spans = [s for s in store.spans(limit=10000) if "ping" in s.name]
    handled = [m for m in store.metrics()
               if m.name == "messages_handled" and m.labels.get("method") == "ping"]
    print(json.dumps({"markers": len(store.logs(text="telemetry-switch-marker")),
                      "call_spans": len([s for s in spans if s.name.startswith("call ")]),
                      "invocation_spans": len([s for s in spans if not s.name.startswith("call ")]),
                      "handled": sum(m.value for m in handled)}))
''')


@pytest.mark.parametrize("flag, expected", [
    ("1", {"markers": 2, "call_spans": 5, "invocation_spans": 10, "handled": 10}),
    ("0", {"markers": 2, "call_spans": 0, "invocation_spans": 0, "handled": 0}),
])
def test_monarch_telemetry_switch(tmp_path, flag, expected):
    script = tmp_path / "switch.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=100, cwd=tmp_path, env=dict(os.environ, MONARCH_TELEMETRY=flag))
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == expected


@pytest.mark.parametrize("name", ["MONARCH_TELEMETRY", "MONARCH_LANES"])
def test_a_switch_that_is_neither_on_nor_off_is_refused(tmp_path, name):
    """`=2` or a typo does not silently mean on: the job does not start, and says why."""
    script = tmp_path / "switch.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=100, cwd=tmp_path, env=dict(os.environ, **{name: "of"}))
    assert out.returncode != 0
    assert f"ValueError: {name}='of': expected one of 1/true/on/yes (on) or 0/false/off/no" \
        " (off)" in out.stderr, out.stderr[-3000:]
