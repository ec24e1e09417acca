"""`monarch top` tunes its garbage collector (`console.app.quiet_gc`): what lives at start is
frozen out of later collections and young collections come less often (at 1,024 actors the
console ran ten full collections in 20 s, up to 212 ms each, and keys waited for them). Run in
a child: the test process's own collector stays as it is."""

from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import gc
from monarch.console.app import GC_GEN0, quiet_gc
before = gc.get_freeze_count()
quiet_gc()
assert gc.get_freeze_count() > before
assert gc.get_threshold()[0] == max(700, GC_GEN0)
print("ok")
"""


def test_quiet_gc_freezes_what_lives_and_spaces_young_collections() -> None:
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stdout + done.stderr
