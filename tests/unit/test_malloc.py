"""The controller's malloc (`_runtime._malloc`): arenas capped, free memory handed back."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_trim_hands_freed_memory_back_to_the_system() -> None:
    """Many small blocks kept alive by a few survivors keep their pages in the process
    (fragmentation); `trim` returns the free ones: RSS falls. In a child, so that this
    process's own heap plays no part."""
    code = textwrap.dedent("""
        import json
        from monarch._runtime import _malloc

        def rss():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) // 1024

        base = rss()
        blocks = [bytearray(600) for _ in range(400_000)]  # ~250 MB of small blocks
        keep = blocks[::1000]  # one survivor a page or so keeps the heap from shrinking
        del blocks
        before = rss()
        assert _malloc.trim()
        print(json.dumps({"base": base, "before": before, "after": rss()}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True)
    import json

    m = json.loads(out.stdout)
    assert m["before"] - m["base"] > 100, m  # the freed blocks were still held
    assert m["after"] < m["before"] - 100, m  # and trim gave them back


def test_limit_arenas_respects_the_environment() -> None:
    code = ("from monarch._runtime import _malloc; "
            "print(_malloc.limit_arenas(), end='')")
    env_set = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=60, check=True, env={"MALLOC_ARENA_MAX": "8",
                                                          "PATH": "/usr/bin:/bin"})
    assert env_set.stdout == "False"  # the user's setting wins
    free = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, check=True, env={"PATH": "/usr/bin:/bin"})
    assert free.stdout == "True"
