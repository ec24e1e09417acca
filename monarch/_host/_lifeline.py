"""No orphans: a spawned process dies when the process that spawned it dies."""

from __future__ import annotations

import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent_pid: int, pdeathsig: bool = True) -> None:
    """Asks the kernel to SIGKILL this process when its parent exits (unless `pdeathsig` is
    False: then the lifeline alone ends it); exits now if the parent is gone already.

    The parent here is the thread that forked us, so spawners fork from long-lived threads.
    """
    try:
        if pdeathsig:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: the zygote's socket EOF still ends every proc
    if os.getppid() != parent_pid:
        os._exit(1)
