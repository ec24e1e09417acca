"""The entry of a proc started by a bootstrap command (`python -m monarch._proc_boot`).

The host forked the proc from its zygote and exec'd the command; the proc's configuration
waits in the file named by MONARCH_PROC_BOOT (private to the job's run directory), which this
module reads, removes, and runs as any forked proc would (`_proc_main.run`).
"""

from __future__ import annotations

import os
import sys

BOOT_ENV = "MONARCH_PROC_BOOT"


def main() -> int:
    path = os.environ.pop(BOOT_ENV, None)
    if not path:
        print(f"monarch._proc_boot starts a proc a host spawned with a bootstrap command; "
              f"{BOOT_ENV} is not set, so this is not one", file=sys.stderr)
        return 2
    import msgpack

    with open(path, "rb") as f:
        config = msgpack.unpackb(f.read(), raw=False)
    os.unlink(path)
    from monarch._proc import _main as _proc_main

    return _proc_main.run(config)


if __name__ == "__main__":
    sys.exit(main())
