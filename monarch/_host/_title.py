"""A forked process's command line, as `ps` shows it.

A zygote forked from its host worker (`_agent.prefork`) would show the worker's command line,
and so would every proc it forks: `ps`, `pkill -f` and whoever counts workers by their command
line would take them for workers. `set_cmdline` writes a new one over the process's argument
area (what `ps` reads through /proc/PID/cmdline), as the setproctitle package does in C; it
cannot grow past the original's length, and it is best effort: Linux only, else nothing.
"""

from __future__ import annotations

import os

from .._runtime._pids import proc_stat


def set_cmdline(args: list[str]) -> bool:
    """Shows `args` as this process's command line (cut to the original's length); False
    where it cannot."""
    fields = proc_stat(os.getpid())
    if fields is None:
        return False
    try:
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
        room = end - start
        text = b"\0".join(a.encode() for a in args)[:room - 1]
        with open("/proc/self/mem", "r+b", buffering=0) as mem:
            mem.seek(start)
            mem.write(text + b"\0" * (room - len(text)))
        return True
    except (OSError, ValueError, IndexError):
        return False
