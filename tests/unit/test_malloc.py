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


def test_a_big_block_freed_in_the_controller_is_given_back_at_once() -> None:
    """With the controller's settings a 4 MiB block is a mapping of its own, returned when
    freed, even after bigger blocks came and went (glibc's own threshold would have climbed
    past it, and the freed block would stay in the heap); pyarrow allocates from malloc."""
    code = textwrap.dedent("""
        import json
        from monarch._runtime import _malloc

        def rss():
            with open("/proc/self/status") as f:
                return next(int(l.split()[1]) for l in f if l.startswith("VmRSS")) // 1024

        assert _malloc.limit_arenas()
        big = bytearray(16 << 20)  # freed: glibc would raise its threshold to 16 MiB
        del big
        base = rss()
        blocks = [bytearray(4 << 20) for _ in range(25)]  # 100 MiB of 4 MiB blocks
        small = [bytearray(64) for _ in range(1000)]  # allocated after them, kept
        held = rss()
        del blocks
        freed = rss()
        arrow = _malloc.arrow_on_malloc()  # before pyarrow: its C++ default too
        import pyarrow as pa
        print(json.dumps({"base": base, "held": held, "freed": freed, "arrow": arrow,
                          "pool": pa.default_memory_pool().backend_name}))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, check=True, env={"PATH": "/usr/bin:/bin"})
    import json

    m = json.loads(out.stdout)
    assert m["held"] - m["base"] > 90, m
    assert m["freed"] < m["base"] + 10, m  # no trim needed: the mappings went back
    assert m["arrow"] is True and m["pool"] == "system"
