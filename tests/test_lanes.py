"""Lanes in a real job (on by default, off with `MONARCH_LANES=0`): the controller and its procs
talk over lanes, in order, big messages whole, and a process that receives garbage on its lane
keeps serving.

The job runs in a script of its own: the pytest process's runtime was made with lanes as the
environment had them when it started."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(180)

SCRIPT = textwrap.dedent('''
    import json, os, socket, struct

    from monarch._runtime import _process_runtime as _process
    from monarch.actor import Actor, current_rank, endpoint, this_host


    def lanes_of(runtime):
        """(links that are lanes, links that are zmq, accepted lane connections)"""
        links = list(runtime.outbox._links.values())
        listener = runtime.inbox.lane
        return (sum(link.lane is not None for link in links),
                sum(link.sock is not None for link in links),
                len(listener.conns) if listener is not None else -1)


    class Peer(Actor):
        def __init__(self):
            self.seen = []

        @endpoint
        def echo(self, x):
            return x

        @endpoint
        def note(self, i):
            self.seen.append(i)

        @endpoint
        def notes(self):
            return self.seen

        @endpoint
        def lanes(self):
            return lanes_of(_process.current())

        @endpoint
        def stats(self):
            s = _process.current().inbox.stats
            return s.received, s.denied_peers, s.bad_frames

        @endpoint
        def lane_path(self):
            return _process.current().inbox.lane.path

        @endpoint
        def relay(self, big):
            """Peer to peer: rank 0 sends to rank 1 and gets it back."""
            other = self.peers.slice(gpus=1)
            return other.echo.call_one(big).get()

        @endpoint
        def know(self, peers):
            self.peers = peers


    procs = this_host().spawn_procs(per_host={"gpus": 2})
    mesh = procs.spawn("peers", Peer)
    one = mesh.slice(gpus=0)
    out = {}
    big = os.urandom(9 << 20)
    out["echo_big"] = one.echo.call_one(big).get(timeout=60) == big
    for i in range(300):
        one.note.broadcast(i)
    out["in_order"] = one.notes.call_one().get(timeout=60) == list(range(300))
    out["broadcast"] = sorted(mesh.echo.call(7).get(timeout=60).values())
    mesh.know.call(mesh).get(timeout=60)
    out["relay_big"] = one.relay.call_one(big).get(timeout=60) == big
    out["controller"] = lanes_of(_process.current())
    out["procs"] = sorted(mesh.lanes.call().get(timeout=60).values())

    # garbage and a wrong secret on rank 1's lane: refused, counted, it keeps serving
    path = mesh.slice(gpus=1).lane_path.call_one().get(timeout=60)
    for payload in (b"garbage that is no lane client", b"MONARCH-LANE-1\\0\\0" +
                    struct.pack("<I", 32) + os.urandom(32)):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        s.sendall(payload)
        s.settimeout(60)
        assert s.recv(16) == b"", "the lane kept a connection it should have refused"
        s.close()
    out["after_garbage"] = mesh.slice(gpus=1).echo.call_one(5).get(timeout=60)
    out["stats"] = mesh.slice(gpus=1).stats.call_one().get(timeout=60)
    procs.stop().get(timeout=60)
    print(json.dumps(out))
''')


def test_a_job_with_lanes_talks_over_them(tmp_path):
    script = tmp_path / "lanes_job.py"
    script.write_text(SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "MONARCH_LANES"}  # the default: on
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=150, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert out["echo_big"] and out["in_order"] and out["relay_big"]
    assert out["broadcast"] == [7, 7]
    lanes, zmq_links, accepted = out["controller"]
    assert lanes >= 2 and zmq_links == 0  # to both procs (and itself), none by zmq
    assert accepted >= 2  # both procs answer over lanes
    for proc_lanes, proc_zmq, proc_accepted in out["procs"]:
        assert proc_lanes >= 1 and proc_zmq == 0 and proc_accepted >= 1
    assert out["after_garbage"] == 5
    received, denied, bad = out["stats"]
    assert received > 0 and denied == 2 and bad == 0


@pytest.mark.parametrize("flag", ["0", "off"])
def test_lanes_are_off_when_asked(tmp_path, flag):
    script = tmp_path / "no_lanes_job.py"
    script.write_text(textwrap.dedent('''
        from monarch._runtime import _process_runtime as _process
        from monarch.actor import Actor, endpoint, this_host

        class P(Actor):
            @endpoint
            def lane(self):
                return _process.current().inbox.lane is not None

        procs = this_host().spawn_procs(per_host={"gpus": 1})
        print(procs.spawn("p", P).lane.call_one().get(timeout=60),
              _process.current().inbox.lane is not None)
        procs.stop().get(timeout=60)
    '''))
    env = {**os.environ, "MONARCH_LANES": flag}
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=150, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "False"]  # the proc's inbox, the controller's
