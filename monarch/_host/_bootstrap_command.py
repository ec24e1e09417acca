"""BootstrapCommand: the program a host runs to start a proc, and that proc's environment.

By default a host forks its procs from a zygote that has the runtime imported (fast). A proc
spawned with a bootstrap command (`HostMesh.spawn_procs(bootstrap_command=...)`, or any proc of
`HostMesh.with_python_executable(...)`) is forked the same way and then becomes `program`
(execve, same pid), so wrappers, other interpreters and per-proc environments work as in
Monarch. The program must end up running `python -m monarch._proc_boot` (as
`default_bootstrap_cmd()` does, or a wrapper script that `exec`s it with "$@").
"""

from __future__ import annotations

import sys
from typing import Any, Mapping

BOOT_MODULE = "monarch._proc_boot"
"""The module a bootstrap command runs: it reads the proc's configuration and runs the proc."""


class BootstrapCommand:
    """How a host starts a proc: `program` with `args` (argv[0] is `arg0` or `program`), in
    the environment of the host agent that spawns it (`inherit_env=True`, the default) or an
    empty one, with `env` applied on top: a `None` value removes that variable."""

    def __init__(self, program: str, arg0: str | None, args: list[str],
                 env: Mapping[str, str | None], inherit_env: bool = True) -> None:
        if not isinstance(program, str) or not program:
            raise TypeError(f"program must be a non-empty str, got {program!r}")
        if arg0 is not None and not isinstance(arg0, str):
            raise TypeError(f"arg0 must be a str or None, got {type(arg0).__name__}")
        if isinstance(args, (str, bytes)) or not all(isinstance(a, str) for a in args):
            raise TypeError(f"args must be a list of str, got {args!r}")
        if not isinstance(inherit_env, bool):
            raise TypeError(f"inherit_env must be a bool, got {type(inherit_env).__name__}")
        self.program = program
        self.arg0 = arg0
        self.args = list(args)
        self.inherit_env = inherit_env
        self._env = _checked_env(env)

    @property
    def env(self) -> dict[str, str | None]:
        """The variables set (str) or removed (None) on top of the inherited environment."""
        return dict(self._env)

    @env.setter
    def env(self, env: Mapping[str, str | None]) -> None:
        self._env = _checked_env(env)

    def with_env(self, env: Mapping[str, str | None]) -> "BootstrapCommand":
        """A copy with `env` merged on top of this command's (None removes a variable)."""
        return BootstrapCommand(self.program, self.arg0, self.args,
                                {**self._env, **_checked_env(env)}, self.inherit_env)

    def argv(self) -> list[str]:
        """The command line the proc starts with."""
        return [self.arg0 or self.program, *self.args]

    def to_wire(self) -> dict[str, Any]:
        """What a host needs to run it (msgpack-able)."""
        return {"program": self.program, "argv": self.argv(), "env": dict(self._env),
                "inherit_env": self.inherit_env}

    def __eq__(self, other: object) -> bool:
        return isinstance(other, BootstrapCommand) and self.to_wire() == other.to_wire()

    def __hash__(self) -> int:
        return hash((self.program, self.arg0, tuple(self.args), self.inherit_env))

    def __reduce__(self) -> Any:
        return BootstrapCommand, (self.program, self.arg0, self.args, self._env,
                                  self.inherit_env)

    def __repr__(self) -> str:
        return (f"BootstrapCommand(program={self.program!r}, arg0={self.arg0!r}, "
                f"args={self.args!r}, env={self._env!r}, inherit_env={self.inherit_env})")


def _checked_env(env: Mapping[str, str | None]) -> dict[str, str | None]:
    if not isinstance(env, Mapping):
        raise TypeError(f"env must be a mapping of str to str or None, got "
                        f"{type(env).__name__}")
    out: dict[str, str | None] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not (value is None or isinstance(value, str)):
            raise TypeError(f"env must map str to str or None, got {key!r}: {value!r}")
        out[key] = value
    return out


def default_bootstrap_cmd() -> BootstrapCommand:
    """The command a host starts a proc with: this interpreter running the proc runtime. Procs
    inherit the environment of the host that spawns them (the caller's environment is not
    copied into the command); customise it with `with_env()`."""
    return BootstrapCommand(sys.executable, None, ["-m", BOOT_MODULE], {})


def python_command(python_executable: str) -> BootstrapCommand:
    """`default_bootstrap_cmd()` with another interpreter (`HostMesh.with_python_executable`)."""
    return BootstrapCommand(python_executable, None, ["-m", BOOT_MODULE], {})


BIND_KEYS = ("cpunodebind", "membind", "physcpubind", "cpus")
"""`proc_bind` keys (numactl's and taskset's): CPUs by list or NUMA node, memory by node."""


def check_proc_bind(proc_bind: Any, procs_per_host: int) -> list[dict[str, str]] | None:
    """`spawn_procs(proc_bind=...)`: one dict per proc of a host, or a clear error."""
    if proc_bind is None:
        return None
    if not isinstance(proc_bind, (list, tuple)):
        raise TypeError(f"proc_bind must be a list of dicts, got {type(proc_bind).__name__}")
    if len(proc_bind) != procs_per_host:
        raise ValueError(f"proc_bind length ({len(proc_bind)}) must equal procs_per_host "
                         f"({procs_per_host})")
    out = []
    for i, bind in enumerate(proc_bind):
        if not isinstance(bind, Mapping):
            raise TypeError(f"proc_bind[{i}] must be a dict, got {type(bind).__name__}")
        for key, value in bind.items():
            if key not in BIND_KEYS:
                raise ValueError(f"proc_bind[{i}]: unknown key {key!r} (known: "
                                 f"{', '.join(BIND_KEYS)})")
            if not isinstance(value, str) or not value:
                raise TypeError(f"proc_bind[{i}][{key!r}] must be a non-empty str, got "
                                f"{value!r}")
            _cpu_list(value)  # a malformed list is refused here, not on the host
        out.append(dict(bind))
    return out


def _cpu_list(text: str) -> set[int]:
    """The kernel's CPU/node list format ("0-3,8,10-11")."""
    out: set[int] = set()
    for part in text.strip().split(","):
        try:
            if "-" in part:
                lo, hi = part.split("-", 1)
                out.update(range(int(lo), int(hi) + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise ValueError(f"not a CPU or node list: {text!r} (e.g. '0-3,8')") from None
    return out


def apply_bind(bind: dict[str, str], launch: dict[str, Any] | None) -> dict[str, Any] | None:
    """In a proc about to start (on its host): pins its CPUs as `bind` asks; returns the launch
    to run (numactl in front of it for `membind`, which needs numactl's memory policy)."""
    import os

    cpus: set[int] = set()
    for key in ("cpus", "physcpubind"):
        if key in bind:
            cpus |= _cpu_list(bind[key])
    for node in _cpu_list(bind["cpunodebind"]) if "cpunodebind" in bind else ():
        with open(f"/sys/devices/system/node/node{node}/cpulist") as f:
            cpus |= _cpu_list(f.read())
    if cpus:
        os.sched_setaffinity(0, cpus)
    if "membind" not in bind:
        return launch
    base = launch or default_bootstrap_cmd().to_wire()
    return dict(base, program="numactl",
                argv=["numactl", f"--membind={bind['membind']}", "--", base["program"],
                      *base["argv"][1:]])
