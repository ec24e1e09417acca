"""A network link between this host and a network namespace of its own, emulated in
userspace: two TUN devices joined by a forwarder thread that delays, drops and cuts the IP
packets between them.

Why not `tc qdisc ... netem`: the kernel of the test machines has no qdisc modules ("Specified
qdisc kind is unknown"). Everything but the link is real: the namespace's processes have their
own network stack, TCP runs end to end over the TUN devices, a dropped packet is retransmitted
by the kernel, a cut link stalls every connection until it heals (or they give up).

    with Link("mnf1", 1) as link:              # 10.77.1.1 here, 10.77.1.2 in the namespace
        subprocess.Popen(link.inside(["python", "-m", "..."]))
        link.set(delay_s=0.05, loss=0.05)
        link.set(cut=True)

Needs root, `ip` (iproute2) and /dev/net/tun.
"""

from __future__ import annotations

import fcntl
import heapq
import itertools
import os
import random
import select
import struct
import subprocess
import threading
import time
from typing import Any

TUNSETIFF = 0x400454CA
IFF_TUN, IFF_NO_PI = 0x0001, 0x1000


def available() -> str | None:
    """Why a link cannot be made here (None: it can)."""
    if os.geteuid() != 0:
        return "needs root"
    if not os.path.exists("/dev/net/tun"):
        return "needs /dev/net/tun"
    if subprocess.run(["which", "ip"], capture_output=True).returncode != 0:
        return "needs ip (iproute2)"
    return None


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=30)


def _tun(name: str) -> int:
    fd = os.open("/dev/net/tun", os.O_RDWR)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    os.set_blocking(fd, False)
    return fd


class Link:
    """The namespace `name` joined to this host by an emulated link on 10.77.`index`.0/24.

    Attributes:
        here: this side's address (10.77.index.1).
        there: the namespace's address (10.77.index.2).
    """

    def __init__(self, name: str, index: int) -> None:
        self.ns, self.outer, self.inner = name, f"{name}o", f"{name}i"
        self.here, self.there = f"10.77.{index}.1", f"10.77.{index}.2"
        self.delay_s, self.loss, self.cut = 0.0, 0.0, False
        self.forwarded = self.dropped = 0
        self._fds: list[int] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._rng = random.Random(index)

    def __enter__(self) -> Link:
        _ip("netns", "add", self.ns)
        try:
            self._fds = [_tun(self.outer), _tun(self.inner)]
            _ip("addr", "add", self.here, "peer", self.there, "dev", self.outer)
            _ip("link", "set", self.outer, "up")
            _ip("link", "set", self.inner, "netns", self.ns)
            _ip("-n", self.ns, "addr", "add", self.there, "peer", self.here, "dev", self.inner)
            _ip("-n", self.ns, "link", "set", self.inner, "up")
            _ip("-n", self.ns, "link", "set", "lo", "up")
        except BaseException:
            self.__exit__()
            raise
        self._thread = threading.Thread(target=self._forward, name=f"link-{self.ns}",
                                        daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        for fd in self._fds:  # the TUN devices go with their last descriptor
            os.close(fd)
        self._fds = []
        subprocess.run(["ip", "netns", "del", self.ns], capture_output=True, timeout=30)

    def inside(self, argv: list[str]) -> list[str]:
        """`argv` to run in the namespace."""
        return ["ip", "netns", "exec", self.ns, *argv]

    def set(self, *, delay_s: float = 0.0, loss: float = 0.0, cut: bool = False) -> None:
        """What the link does from now on: each packet waits `delay_s`, a share `loss` of
        them is dropped, and while `cut` every one is."""
        self.delay_s, self.loss, self.cut = delay_s, loss, cut

    def _forward(self) -> None:
        outer, inner = self._fds
        other = {outer: inner, inner: outer}
        queue: list[tuple[float, int, int, bytes]] = []
        order = itertools.count()
        while not self._stop.is_set():
            now = time.monotonic()
            while queue and queue[0][0] <= now:
                _, _, fd, packet = heapq.heappop(queue)
                try:
                    os.write(fd, packet)
                except OSError:
                    pass
            wait = min(queue[0][0] - now, 0.05) if queue else 0.05
            ready, _, _ = select.select([outer, inner], [], [], max(wait, 0.0))
            for fd in ready:
                while True:
                    try:
                        packet = os.read(fd, 65536)
                    except (BlockingIOError, OSError):
                        break
                    if self.cut or (self.loss and self._rng.random() < self.loss):
                        self.dropped += 1
                        continue
                    self.forwarded += 1
                    heapq.heappush(queue, (time.monotonic() + self.delay_s, next(order),
                                           other[fd], packet))
