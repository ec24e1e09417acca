"""The `monarch.config` knobs a proc follows: sent with its config, applied when it starts.

The controller reads its knobs when it spawns a proc mesh (`proc_settings`); the proc sets them
in its own `monarch.config` and applies them to its runtime (`apply_settings`) before it
handles anything. The controller applies its own the same way at each spawn (knobs set after
the job started count from then on).
"""

from __future__ import annotations

from typing import Any

from . import _forward
from .. import config

PROC_KEYS = ("cast_fanout", "message_delivery_timeout", "actor_spawn_max_idle",
             "codec_max_frame_length", "mesh_bootstrap_enable_pdeathsig", "telemetry",
             "rdma_allow_tcp_fallback", "rdma_disable_ibverbs")
"""The knobs that act inside procs."""


def proc_settings() -> dict[str, Any]:
    """The knobs of this process that its procs follow."""
    return {key: config.get(key) for key in PROC_KEYS}


def apply_settings(runtime: Any, settings: dict[str, Any]) -> None:
    """Sets `settings` in this process's config and makes `runtime` (and this process's cast
    forwarding) follow them."""
    config.configure(**{k: v for k, v in settings.items() if k in config.KEYS})
    follow_settings(runtime)


def follow_settings(runtime: Any) -> None:
    """Makes `runtime` (and this process's cast forwarding) follow the current knobs."""
    _forward.FANOUT = int(config.get("cast_fanout"))
    runtime.outbox.delivery_timeout = config.seconds("message_delivery_timeout")
    runtime.spawn_wait_s = config.seconds("actor_spawn_max_idle")
