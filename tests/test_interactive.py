"""Interactive use: IPython cells with top-level await, meshes living across cells."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("IPython")
pytestmark = pytest.mark.timeout(120)


def test_ipython_cells_await_and_get(tmp_path):
    driver = tmp_path / "cells.py"
    driver.write_text(textwrap.dedent('''
        from IPython.core.interactiveshell import InteractiveShell

        shell = InteractiveShell.instance()
        cells = [
            "from monarch.actor import Actor, endpoint, this_host",
            "class Adder(Actor):\\n    @endpoint\\n    async def add(self, a, b):\\n"
            "        print('adding', a, b, flush=True)\\n        return a + b",
            "procs = this_host().spawn_procs(per_host={'gpus': 2})\\n"
            "adders = procs.spawn('adders', Adder)",
            "x = await adders.slice(gpus=0).add.call_one(1, 2)",
            "y = adders.slice(gpus=1).add.call_one(x, 10).get()",
            "print('result', x, y, flush=True)",
            "procs.stop().get()",
        ]
        for cell in cells:
            result = shell.run_cell(cell)
            if not result.success:
                raise SystemExit(f"cell failed: {cell!r}: {result.error_in_exec!r}")
    '''))
    out = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True,
                         timeout=100, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "result 3 13" in out.stdout
    assert "adding 1 2" in out.stdout  # actors' stdout shows up where the user looks
