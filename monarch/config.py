"""Runtime knobs: `configure(**kwargs)` and the `configured(**kwargs)` context manager.

Keys are Monarch's names. The ones this runtime acts on are listed in `SUPPORTED` with their
defaults; Monarch's other keys are accepted (scripts run unchanged) and recorded, with no effect
here. An unknown key is a TypeError.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

SUPPORTED: dict[str, Any] = {
    "default_transport": "unix",
    "enable_log_forwarding": True,
    "tail_log_lines": 1000,
    "message_delivery_timeout": "30s",
    "stop_actor_timeout": "10s",
    "process_exit_timeout": "10s",
    "cast_fanout": 16,
    "telemetry": True,
}
"""Keys this runtime acts on, with their defaults."""

ACCEPTED = frozenset({
    "enable_file_capture", "codec_max_frame_length", "host_spawn_ready_timeout",
    "mesh_proc_spawn_max_idle", "message_ack_time_interval", "message_ack_every_n_messages",
    "message_ttl_default", "split_max_buffer_size", "split_max_buffer_age", "cleanup_timeout",
    "default_encoding", "channel_net_rx_buffer_full_check_interval", "channel_tcp_congestion",
    "message_latency_sampling_rate", "enable_dest_actor_reordering_buffer",
    "actor_queue_dispatch", "mesh_bootstrap_enable_pdeathsig", "mesh_terminate_concurrency",
    "mesh_terminate_timeout", "shared_asyncio_runtime", "small_write_threshold",
    "max_cast_dimension_size", "remote_allocator_heartbeat_interval",
})
"""Monarch keys accepted for compatibility; they change nothing here."""

_values: dict[str, Any] = {}


def configure(**kwargs: Any) -> None:
    """Sets runtime knobs for this process (see `SUPPORTED`); unknown keys raise TypeError."""
    for key in kwargs:
        if key not in SUPPORTED and key not in ACCEPTED:
            raise TypeError(f"configure() got an unexpected keyword argument '{key}'")
    _values.update(kwargs)


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
    """The current value of a supported knob."""
    return _values.get(key, SUPPORTED[key])


def seconds(key: str) -> float:
    """A duration knob in seconds (knobs take numbers or humantime strings like "1m 30s")."""
    return parse_duration(get(key))


def parse_duration(value: Any) -> float:
    """Seconds in a number or a humantime string ("250ms", "30s", "5m", "2h", "1h 30m")."""
    if isinstance(value, (int, float)):
        return float(value)
    units = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
    total = 0.0
    for part in str(value).split():
        number = part.rstrip("abcdefghijklmnopqrstuvwxyz")
        unit = part[len(number):] or "s"
        if not number or unit not in units:
            raise ValueError(f"not a duration: {value!r}")
        total += float(number) * units[unit]
    return total


def get_runtime_config() -> dict[str, Any]:
    """Every knob set in this process (defaults included for supported ones)."""
    return {**SUPPORTED, **_values}


def get_global_config() -> dict[str, Any]:
    """Same as `get_runtime_config` (this runtime has one layer)."""
    return get_runtime_config()


def clear_runtime_config() -> None:
    """Forgets every knob set with `configure`."""
    _values.clear()
