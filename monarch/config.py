"""Runtime knobs: `configure(**kwargs)` and the `configured(**kwargs)` context manager.

Keys are Monarch's names. Every key listed in `KEYS` acts (what each does is its description);
a Monarch key that tunes a piece of its Rust runtime with no counterpart here (`RUST_ONLY`) is
accepted, so a Monarch script runs unchanged, with one warning per key that names it; any
other key is a ValueError, so no setting is silently ignored. Values are checked against the key's kind: durations take humantime strings
("250ms", "1m 30s"), not bare numbers.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import re
import warnings
from typing import Any, Callable, Iterator


@dataclasses.dataclass(frozen=True)
class Key:
    """A knob: its default, the kind of value it takes, and what it does."""

    default: Any
    kind: str  # "duration", "int", "bool", "str", "transport", "fanout"
    does: str


KEYS: dict[str, Key] = {
    "default_transport": Key("unix", "transport",
                             "how new processes of the job listen: unix (ipc) or tcp"),
    "enable_log_forwarding": Key(False, "bool",
                                 "proc meshes spawned while it is on can stream their procs' "
                                 "output to the client (`ProcMesh.logging_option`)"),
    "enable_file_capture": Key(False, "bool",
                               "proc meshes spawned while it is on have each proc's output "
                               "written to `<job history>/logs/<proc>.log` as well"),
    "tail_log_lines": Key(0, "int",
                          "a proc that dies has its last N output lines attached to its "
                          "failure (`MeshFailure.log_tail`, printed by the default fault "
                          "hook)"),
    "prefix_with_rank": Key(True, "bool",
                            "lines streamed to the client start with `[host proc] [rank]`"),
    "message_delivery_timeout": Key("30s", "duration",
                                    "how long a send may wait for a peer that does not take "
                                    "messages (back-pressure) before the call fails"),
    "host_spawn_ready_timeout": Key("30s", "duration",
                                    "how long `spawn_procs` waits for the hosts' agents to "
                                    "fork the procs"),
    "mesh_proc_spawn_max_idle": Key("30s", "duration",
                                    "how long a proc mesh on other hosts may take until every "
                                    "proc announced itself; then its spawn fails"),
    "codec_max_frame_length": Key(10 * 1024 ** 3, "int",
                                  "a message larger than this many bytes is refused at the "
                                  "sender (SupervisionError naming the size)"),
    "stop_actor_timeout": Key("10s", "duration",
                              "an actor stuck in a handler counts as stopped after this"),
    "process_exit_timeout": Key("10s", "duration",
                                "a stopping proc that has not exited by then is killed"),
    "mesh_terminate_timeout": Key("10s", "duration",
                                  "how long stopping a proc mesh may take: its procs not "
                                  "exited by then are killed (the sooner of this and "
                                  "process_exit_timeout)"),
    "mesh_attach_config_timeout": Key("1m", "duration",
                                      "how long `attach_to_workers` waits for each worker"),
    "actor_spawn_max_idle": Key("30s", "duration",
                                "how long `ActorMesh.initialized` waits for a spawn to arrive"),
    "mesh_bootstrap_enable_pdeathsig": Key(True, "bool",
                                           "procs get PR_SET_PDEATHSIG (they die with their "
                                           "zygote) on top of their lifeline"),
    "cast_fanout": Key(16, "fanout", "children per hop of the cast tree"),
    "telemetry": Key(True, "bool", "spans and metrics of every process (logs always flow)"),
    "rdma_allow_tcp_fallback": Key(True, "bool",
                                   "RDMABuffer may use the software data plane (shared memory "
                                   "on one host, tcp across hosts), as it must here: no "
                                   "ibverbs device is ever used. False: creating an "
                                   "RDMABuffer raises RuntimeError (Monarch's 'none' backend)"),
    "rdma_disable_ibverbs": Key(False, "bool",
                                "never use ibverbs: this runtime has no ibverbs transport, so "
                                "either value leaves the software data plane (see "
                                "rdma_allow_tcp_fallback) as the one RDMABuffer uses"),
}
"""Every knob this runtime acts on, with its default."""

_INERT = ("a knob of Monarch's Rust runtime (hyperactor): accepted and kept so a Monarch "
          "script runs unchanged, with one warning; nothing here acts on it")

RUST_ONLY: dict[str, Key] = {name: Key(default, kind, _INERT) for name, default, kind in (
    ("message_ack_time_interval", "500ms", "duration"),
    ("message_ack_every_n_messages", 1000, "int"),
    ("message_ttl_default", 64, "int"),
    ("split_max_buffer_size", 5, "int"),
    ("split_max_buffer_age", "50ms", "duration"),
    ("channel_net_rx_buffer_full_check_interval", "5s", "duration"),
    ("channel_tcp_congestion", "", "str"),
    ("default_encoding", None, "any"),
    ("enable_dest_actor_reordering_buffer", True, "bool"),
    ("small_write_threshold", 256, "int"),
    ("max_cast_dimension_size", 16, "int"),
    ("remote_alloc_bind_to_inaddr_any", False, "bool"),
    ("remote_alloc_bootstrap_addr", None, "any"),
    ("remote_alloc_allowed_port_range", None, "any"),
    ("read_log_buffer", 100, "int"),
    ("force_file_log", False, "bool"),
    ("get_actor_state_max_idle", "30s", "duration"),
    ("get_proc_state_max_idle", "1m", "duration"),
    ("supervision_watchdog_timeout", "2m", "duration"),
    ("proc_stop_max_idle", "30s", "duration"),
    ("mesh_terminate_concurrency", 16, "int"),
    ("message_latency_sampling_rate", 0.01, "float"),
    ("cleanup_timeout", "3s", "duration"),
    ("actor_queue_dispatch", None, "any"),
    ("shared_asyncio_runtime", None, "any"),
    ("remote_allocator_heartbeat_interval", None, "any"),
    ("mesh_admin_addr", "[::]:1729", "str"),
    ("pyspy_bin", "", "str"),
    ("rdma_ibverbs_target", "", "str"),
    ("rdma_max_nics_per_buffer", None, "any"),
    ("rdma_peer_device_affinity", "", "str"),
    ("rdma_runtime_worker_threads", 4, "int"),
)}
"""Monarch keys that tune its Rust runtime (hyperactor's channels, acks, encodings,
watchdogs, allocators, admin agent, ibverbs): they have no counterpart here. Setting one is
accepted, checked against its kind and kept (`configured` restores it, `get_global_config`
lists it with Monarch's default), with one `UserWarning` per key that names it: never
silently, never a crash of a Monarch script."""

_warned: set[str] = set()  # RUST_ONLY keys already warned about

_values: dict[str, Any] = {}

prefix_python_logs_with_actor = True
"""Python log messages written in an actor start with `[actor=<its name>] ` (as Monarch's);
set to False to leave them as written. Read at each log record."""


def configure(**kwargs: Any) -> None:
    """Sets runtime knobs for this process (see `KEYS`).

    Raises:
        TypeError: a value of the wrong kind (or a malformed duration).
        ValueError: an unknown key or a bad value.
    """
    checked = {key: _check(key, value) for key, value in kwargs.items()}
    _values.update(checked)


def _check(key: str, value: Any) -> Any:
    spec = KEYS.get(key)
    if spec is None and key in RUST_ONLY:
        if key not in _warned:
            _warned.add(key)
            warnings.warn(f"monarch.config: {key} tunes Monarch's Rust runtime "
                          "(hyperactor), which pymonarch does not have: accepted, and it "
                          "changes nothing here", UserWarning, stacklevel=4)
        spec = RUST_ONLY[key]
    if spec is None:
        raise ValueError(f"configure() got an unknown key '{key}' (known: "
                         f"{', '.join(sorted(KEYS))})")
    return _CHECKS[spec.kind](key, value)


def _duration(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{key} takes a duration string such as '30s' or '1m 30s', "
                        f"not {type(value).__name__}")
    try:
        return format_duration(parse_duration(value, strict=True))
    except ValueError as exc:
        raise TypeError(f"Invalid duration format for {key}: {exc}") from None


def _int(key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{key} takes an int, not {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{key} must not be negative, got {value}")
    return value


def _fanout(key: str, value: Any) -> int:
    if _int(key, value) < 1:
        raise ValueError(f"{key} must be at least 1, got {value}")
    return value


def _float(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{key} takes a float, not {type(value).__name__}")
    return float(value)


def _bool(key: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise TypeError(f"{key} takes a bool, not {type(value).__name__}")
    return value


def _str(key: str, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{key} takes a str, not {type(value).__name__}")
    return value


class ChannelTransport(enum.Enum):
    """How processes reach each other. Unix sockets on one host, TCP across hosts."""

    Unix = "unix"
    Local = "local"
    TcpWithLocalhost = "tcp_localhost"
    TcpWithHostname = "tcp_hostname"
    Tls = "tls"
    Quic = "quic"
    MetaTlsWithHostname = "metatls_hostname"
    MetaTlsWithIpV6 = "metatls_ipv6"
    MetaQuicWithHostname = "metaquic_hostname"
    MetaQuicWithIpV6 = "metaquic_ipv6"

    @staticmethod
    def get(name: str) -> "ChannelTransport":
        """The transport named `name` (its value or its member name)."""
        for member in ChannelTransport:
            if name in (member.value, member.name):
                return member
        raise ValueError(f"unknown transport {name!r}")


_SUPPORTED = {ChannelTransport.Unix, ChannelTransport.Local, ChannelTransport.TcpWithLocalhost,
              ChannelTransport.TcpWithHostname}


def transport_key(member: ChannelTransport) -> str:
    """What `default_transport` stores for a transport; ValueError for one not available."""
    if member not in _SUPPORTED:
        raise ValueError(f"transport {member.name} is not available in this runtime; use Unix "
                         "or TcpWithHostname")
    return "unix" if member is ChannelTransport.Local else member.value


def enable_transport(transport: Any) -> None:
    """Chooses the transport new processes of this job listen on (a `ChannelTransport` or its
    name; `monarch.actor.enable_transport`).

    Unix (ipc) and TCP are available; TLS and QUIC variants raise ValueError (peers here are
    authenticated with the job secret, and encrypted with CURVE off loopback).
    """
    member = transport if isinstance(transport, ChannelTransport) else ChannelTransport.get(
        transport)
    configure(default_transport=member)


def _transport(key: str, value: Any) -> str:
    if isinstance(value, ChannelTransport):
        return transport_key(value)
    if isinstance(value, str):
        return transport_key(ChannelTransport.get(value))
    raise TypeError(f"{key} takes a ChannelTransport or its name, not {type(value).__name__}")


_CHECKS: dict[str, Callable[[str, Any], Any]] = {
    "duration": _duration, "int": _int, "bool": _bool, "str": _str, "transport": _transport,
    "fanout": _fanout, "float": _float, "any": lambda key, value: value,
}


@contextlib.contextmanager
def configured(**overrides: Any) -> Iterator[dict[str, Any]]:
    """Applies `overrides` inside the block and restores the previous values after it."""
    saved = dict(_values)
    configure(**overrides)
    try:
        yield get_runtime_config()
    finally:
        _values.clear()
        _values.update(saved)


def get(key: str) -> Any:
    """The current value of a knob."""
    spec = KEYS.get(key) or RUST_ONLY.get(key)
    return _values.get(key, spec.default if spec is not None else None)


def seconds(key: str) -> float:
    """A duration knob in seconds."""
    return parse_duration(get(key))


_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "secs": 1.0, "m": 60.0, "min": 60.0,
          "mins": 60.0, "h": 3600.0, "hr": 3600.0, "d": 86400.0}


_TERM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)", re.IGNORECASE)


def parse_duration(value: Any, strict: bool = False) -> float:
    """Seconds in a number or a humantime string ("250ms", "30s", "1m 30s", "1h30m"); a bare
    number in a string counts as seconds unless `strict` (then the unit is required)."""
    if isinstance(value, (int, float)):
        return float(value)
    text = str(value).strip()
    total, at = 0.0, 0
    while at < len(text):
        match = _TERM.match(text, at)
        if match is None:
            raise ValueError(f"not a duration: {value!r}")
        number, unit = match.group(1), match.group(2).lower()
        if not unit and (strict or match.end() < len(text.rstrip())):
            raise ValueError(f"not a duration: {value!r} (a unit is needed: ms, s, m, h)")
        if unit and unit not in _UNITS:
            raise ValueError(f"not a duration: {value!r} (unknown unit {unit!r})")
        total += float(number) * _UNITS.get(unit, 1.0)
        at = match.end()
        while at < len(text) and text[at].isspace():
            at += 1
    if not text:
        raise ValueError(f"not a duration: {value!r}")
    return total


def format_duration(seconds: float) -> str:
    """Seconds as humantime writes them: `1m 30s`, `1h 30m`, `500ms`."""
    millis = round(seconds * 1000)
    parts = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000),
                       ("ms", 1)):
        count, millis = divmod(millis, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts) or "0s"


def get_runtime_config() -> dict[str, Any]:
    """Every knob, as set in this process or its default, the Rust-only ones too (kept,
    acting on nothing)."""
    return {key: get(key) for key in (*KEYS, *RUST_ONLY)}


def get_global_config() -> dict[str, Any]:
    """Same as `get_runtime_config` (this runtime has one layer)."""
    return get_runtime_config()


def clear_runtime_config() -> None:
    """Forgets every knob set with `configure`."""
    _values.clear()


def parametrize_config(**options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A pytest decorator that runs a test once per combination of knob values (the cartesian
    product), inside `configured(...)` with them: `@parametrize_config(telemetry={True,
    False}, cast_fanout=[2, 16])`."""
    import itertools

    if not options:
        raise ValueError("parametrize_config requires at least one config option")
    keys = list(options)
    return _parametrized(keys, list(itertools.product(*(list(options[k]) for k in keys))))


def parametrize_config_pointwise(
        **options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """As `parametrize_config`, with the value sequences taken in lockstep (zip): every
    sequence must have the same length, and the test runs once per position."""
    if not options:
        raise ValueError("parametrize_config_pointwise requires at least one config option")
    keys = list(options)
    columns = [list(options[k]) for k in keys]
    if len({len(c) for c in columns}) != 1:
        raise ValueError("parametrize_config_pointwise requires every option to have the same "
                         f"number of values; got {dict(zip(keys, map(len, columns)))}")
    return _parametrized(keys, list(zip(*columns)))


def _parametrized(keys: list[str],
                  rows: list[tuple[Any, ...]]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    import functools
    import inspect

    import pytest

    settings = [dict(zip(keys, row)) for row in rows]
    ids = ["-".join(f"{k}={v}" for k, v in zip(keys, row)) for row in rows]

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        extra = inspect.Parameter("_config_overrides", inspect.Parameter.POSITIONAL_OR_KEYWORD)
        if inspect.iscoroutinefunction(fn):
            @functools.wraps(fn)
            async def run_async(_config_overrides: dict[str, Any], *args: Any,
                                **kwargs: Any) -> Any:
                with configured(**_config_overrides):
                    return await fn(*args, **kwargs)

            wrapped: Any = run_async
        else:
            @functools.wraps(fn)
            def run(_config_overrides: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
                with configured(**_config_overrides):
                    return fn(*args, **kwargs)

            wrapped = run
        wrapped.__signature__ = signature.replace(
            parameters=[extra, *signature.parameters.values()])
        return pytest.mark.parametrize("_config_overrides", settings, ids=ids)(wrapped)

    return decorate
