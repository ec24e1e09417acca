"""The per-user run directory: where each running job keeps its private files.

`<root>/<job id>/` holds a job's sockets and its admin discovery file (`admin.json`). The root
is `$MONARCH_RUN_DIR` or `/tmp/monarch-<uid>`, mode 0700, owned by the user.
"""

from __future__ import annotations

import os
from pathlib import Path

DISCOVERY = "admin.json"
"""The name of a job's admin discovery file inside its run directory."""


def run_root_path() -> Path:
    """The run root's path (read from the environment now); it may not exist."""
    base = os.environ.get("MONARCH_RUN_DIR") or f"/tmp/monarch-{os.getuid()}"
    return Path(base)


def run_root() -> Path:
    """The per-user directory (mode 0700) holding each running job's directory; created."""
    root = run_root_path()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    if root.stat().st_uid != os.getuid():
        raise PermissionError(f"{root} belongs to another user")
    os.chmod(root, 0o700)
    return root
