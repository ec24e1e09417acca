"""A wire fuzzer on the real sockets of a proc and of the controller: wrong secrets, garbage,
truncated, oversized and reordered frames, replayed calls, and garbage on a proc's lane, for
`FUZZ_EXAMPLES` hypothesis examples (more with `MONARCH_FUZZ_EXAMPLES`). Every one is refused
and counted, a replayed call never runs twice, no process dies, the memory of the proc does not
grow, and the job answers afterwards."""

from __future__ import annotations

import collections
import os
import socket

import msgpack
import pytest
import zmq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from waiting import wait_until

from test_garbage import push

from monarch._runtime._identity import current_process
from monarch._wire._lane import lane_path
from monarch._wire._messages import VERSION, Call, encode
from monarch.actor import Actor, endpoint

pytestmark = pytest.mark.timeout(600)

FUZZ_EXAMPLES = int(os.environ.get("MONARCH_FUZZ_EXAMPLES", "2000"))


class Tally(Actor):
    def __init__(self) -> None:
        self.calls = 0

    @endpoint
    def add(self, a: int, b: int) -> int:
        self.calls += 1
        return a + b

    @endpoint
    def count(self) -> int:
        return self.calls

    @endpoint
    def rss_mb(self) -> float:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) / 1024 for line in f if line.startswith("VmRSS"))


def _push(ctx: zmq.Context, address: str, password: bytes | None) -> zmq.Socket:
    sock = push(ctx, address, password)
    sock.sndtimeo = 5000
    return sock


KINDS = ("garbage", "truncated", "oversized", "reordered", "replayed", "wrong_secret", "lane")


def test_fuzzed_frames_are_refused_counted_and_change_nothing(procs):
    from monarch._runtime import _process_runtime as _process

    tally = procs.spawn("fuzz_target", Tally)
    target = tally.slice(**{label: 0 for label in procs.sizes})
    assert target.add.call_one(1, 2).get(timeout=30) == 3
    proc_address = procs._table[procs._ranks[0]]
    controller = _process.current()
    secret = current_process().secret
    view = procs._view.to_wire()
    mesh = tally._mesh_id
    ctx = zmq.Context()
    insiders = {"proc": _push(ctx, proc_address, secret),
                "controller": _push(ctx, controller.address, secret)}
    sent: collections.Counter[str] = collections.Counter()
    replays = collections.Counter()
    impostors: list[zmq.Socket] = []
    base = {"proc": _stats(procs), "controller": _controller_stats(controller)}
    rss_before = target.rss_mb.call_one().get(timeout=30)

    def call(seq: int) -> list[bytes]:
        msg = Call(f"fuzzer-{seq}", mesh, "add", procs._procs, view, 0, 1, ((0, 1),), None,
                   None, 0, 1)
        from monarch._wire import _serial

        return [encode(msg), _serial.dumps(((1, 1), {}))[0]]

    @settings(max_examples=FUZZ_EXAMPLES, deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(kind=st.sampled_from(KINDS), where=st.sampled_from(["proc", "controller"]),
           data=st.binary(min_size=1, max_size=512), cut=st.integers(1, 40))
    def fuzz(kind: str, where: str, data: bytes, cut: int) -> None:
        sock = insiders[where]
        if kind == "garbage":
            sock.send(b"\xc1" + data)  # 0xc1 is never valid msgpack
        elif kind == "truncated":
            sock.send(call(10**7)[0][:cut])  # an envelope cut short
        elif kind == "oversized":
            sock.send_multipart([b"\xc1" + data, os.urandom(2 << 20)])
        elif kind == "reordered":
            envelope, payload = call(10**6 + sent["reordered"])
            sock.send_multipart([payload, envelope])
        elif kind == "replayed":
            if where == "controller":
                return  # calls go to procs
            seq = len(replays)
            frames = call(seq)
            sock.send_multipart(frames)  # the original: runs once
            sock.send_multipart(frames)  # the replay: refused
            replays[seq] += 1
        elif kind == "wrong_secret":
            impostor = _push(ctx, proc_address if where == "proc" else controller.address,
                             os.urandom(32))
            try:  # the handshake fails: nothing is ever sent (closed at the end)
                impostor.send(msgpack.packb([VERSION, 1, "x"]), zmq.NOBLOCK)
            except zmq.Again:
                pass
            impostors.append(impostor)
            if len(impostors) > 32:  # the oldest had their handshake: this side's descriptors
                impostors.pop(0).close(linger=0)
        elif kind == "lane":
            path = lane_path(proc_address)
            if path is None:
                return
            raw = socket.socket(socket.AF_UNIX)
            raw.connect(path)
            raw.sendall(data)
            raw.close()
        sent[f"{where}:{kind}"] += 1

    try:
        fuzz()
        proc_bad = sum(sent[f"proc:{k}"] for k in ("garbage", "truncated", "oversized",
                                                    "reordered"))
        ctl_bad = sum(sent[f"controller:{k}"] for k in ("garbage", "truncated", "oversized",
                                                         "reordered"))

        def counted() -> dict | None:
            now = _stats(procs)
            ctl = _controller_stats(controller)
            done = (now["bad_frames"] - base["proc"]["bad_frames"] >= proc_bad
                    and now["duplicates"] - base["proc"]["duplicates"] >= len(replays)
                    and ctl["bad_frames"] - base["controller"]["bad_frames"] >= ctl_bad
                    and _refused(now) - _refused(base["proc"]) >= (
                        sent["proc:wrong_secret"] > 0) + (sent["proc:lane"] > 0))
            return now if done else None

        now = wait_until(counted, f"every fuzzed frame counted ({dict(sent)})", 60)
        # each replayed call ran once: the original; its replay did not run again
        assert target.count.call_one().get(timeout=30) == 1 + len(replays)
        assert now["duplicates"] - base["proc"]["duplicates"] == len(replays)
        assert now["internal_errors"] == base["proc"]["internal_errors"]
        assert target.add.call_one(2, 3).get(timeout=30) == 5  # alive, and still right
        assert target.rss_mb.call_one().get(timeout=30) - rss_before < 30
        assert set(k.split(":")[1] for k in sent) >= set(KINDS) - {"lane"} or FUZZ_EXAMPLES < 50
    finally:
        ctx.destroy(linger=0)


def _stats(procs) -> dict:
    return procs.stats().get(timeout=30).get(0)


def _controller_stats(runtime) -> dict:
    stats = runtime.inbox.stats
    return {"bad_frames": stats.bad_frames, "denied_peers": stats.denied_peers}


def _refused(stats: dict) -> int:
    return stats["denied_peers"] + stats["failed_handshakes"]
