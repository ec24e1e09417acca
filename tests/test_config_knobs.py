"""`monarch.config`: every knob acts (in the controller and in procs) or is refused."""

from __future__ import annotations

import os
import threading

import pytest
import zmq

from monarch import config
from monarch._wire import _transport
from monarch._wire._messages import Notice
from monarch._wire._transport import Inbox, Outbox, PeerGone
from monarch.actor import Actor, SupervisionError, endpoint, this_host
from monarch.config import configure, configured

pytestmark = pytest.mark.timeout(120)


def test_unknown_refused_and_mistyped_keys():
    with pytest.raises(ValueError, match="unknown key 'no_such_knob'"):
        configure(no_such_knob=1)
    import warnings

    from monarch import config

    config._warned.discard("message_ack_time_interval")
    # a key of Monarch's Rust runtime: a Monarch script keeps running, told once
    with pytest.warns(UserWarning, match="message_ack_time_interval tunes Monarch's Rust "
                                         "runtime.*accepted, and it changes nothing here"):
        with configured(message_ack_time_interval="1s", split_max_buffer_size=5):
            assert config.get_runtime_config()["message_ack_time_interval"] == "1s"
    assert config.get_runtime_config()["message_ack_time_interval"] == "500ms"  # restored
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time: no warning
        with configured(message_ack_time_interval="2s"):
            pass
    with pytest.raises(TypeError, match="duration string"):
        configure(process_exit_timeout=30)
    for bad in ("thirty", "30", "abc123", "1x"):  # a duration needs its unit
        with pytest.raises(TypeError, match="Invalid duration format"):
            configure(process_exit_timeout=bad)
    with pytest.raises(TypeError, match="takes a bool"):
        configure(enable_log_forwarding="yes")
    with pytest.raises(ValueError, match="at least 1"):
        configure(cast_fanout=0)
    with pytest.raises(ValueError, match="not available"):
        configure(default_transport="quic")
    with configured(tail_log_lines=7, message_delivery_timeout="1m 30s") as now:
        assert now["tail_log_lines"] == 7 and config.seconds("message_delivery_timeout") == 90
        assert now["message_delivery_timeout"] == "1m 30s"
    with configured(host_spawn_ready_timeout="90s", mesh_proc_spawn_max_idle="1h30m") as now:
        assert now["host_spawn_ready_timeout"] == "1m 30s"  # as humantime writes it
        assert now["mesh_proc_spawn_max_idle"] == "1h 30m"
    assert config.get("tail_log_lines") == 0  # restored
    assert set(config.get_global_config()) == set(config.KEYS) | set(config.RUST_ONLY)


class Knobs(Actor):
    @endpoint
    def seen(self) -> dict:
        from monarch._runtime import _forward, _process_runtime as _process

        runtime = _process.current()
        return {"fanout": _forward.FANOUT, "delivery": runtime.outbox.delivery_timeout,
                "spawn_wait": runtime.spawn_wait_s,
                "frame": config.get("codec_max_frame_length")}

    @endpoint
    def nbytes(self, data: bytes) -> int:
        return len(data)


def test_knobs_reach_the_procs_spawned_under_them(fault_log):
    with configured(cast_fanout=2, message_delivery_timeout="7s", actor_spawn_max_idle="9s",
                    codec_max_frame_length=100_000):
        procs = this_host().spawn_procs(per_host={"gpus": 2})
    try:
        mesh = procs.spawn("knobs", Knobs)
        assert list(mesh.seen.call().get(timeout=60).values()) == [
            {"fanout": 2, "delivery": 7.0, "spawn_wait": 9.0, "frame": 100_000}] * 2
        with configured(codec_max_frame_length=1_000):
            with pytest.raises(SupervisionError, match="more than codec_max_frame_length=1000"):
                mesh.nbytes.call(b"x" * 5_000)
            assert list(mesh.nbytes.call(b"x" * 100).get(timeout=60).values()) == [100, 100]
    finally:
        procs.stop().get(timeout=60)


def test_a_send_the_peer_never_takes_gives_up_after_the_delivery_timeout(monkeypatch, tmp_path):
    monkeypatch.setattr(_transport, "HWM", 5)
    ctx = zmq.Context()
    secret = os.urandom(32)
    inbox = Inbox(ctx, secret, f"ipc://{tmp_path}/slow.sock")  # never read
    outbox = Outbox(ctx, secret)
    outbox.delivery_timeout = 0.5
    failed: list[PeerGone] = []

    def flood() -> None:
        try:
            for i in range(100_000):
                outbox.send(inbox.address, Notice("x", i))
        except PeerGone as exc:
            failed.append(exc)

    thread = threading.Thread(target=flood)
    thread.start()
    thread.join(timeout=60)
    try:
        assert not thread.is_alive() and failed
        assert "message_delivery_timeout" in str(failed[0])
    finally:
        outbox.close(0)
        inbox.close()
        ctx.destroy(linger=0)


def test_parametrize_config_runs_a_test_once_per_setting():
    seen = []

    @config.parametrize_config_pointwise(tail_log_lines=[1, 2], prefix_with_rank=[True, False])
    def probe(word):
        seen.append((config.get("tail_log_lines"), config.get("prefix_with_rank"), word))

    (mark,) = probe.pytestmark
    assert mark.args[0] == "_config_overrides"
    assert mark.kwargs["ids"] == ["tail_log_lines=1-prefix_with_rank=True",
                                  "tail_log_lines=2-prefix_with_rank=False"]
    for overrides in mark.args[1]:
        probe(overrides, "x")
    assert seen == [(1, True, "x"), (2, False, "x")]
    assert config.get("tail_log_lines") == 0  # each run restores what it found
    def other():
        pass

    product = config.parametrize_config(tail_log_lines=[1, 2], cast_fanout=[4, 8])(other)
    assert len(product.pytestmark[0].args[1]) == 4  # every combination
    with pytest.raises(ValueError, match="same number of values"):
        config.parametrize_config_pointwise(tail_log_lines=[1], cast_fanout=[1, 2])
    with pytest.raises(ValueError, match="at least one config option"):
        config.parametrize_config()
