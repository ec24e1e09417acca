"""The admin client's kept-alive connections.

`monarch top` asks a job's admin API ~14 times a second (a poll of five requests twice a
second, log pages four times). A new TCP connection per request made the job's controller
accept it and start a handler thread for it each time, in a process whose main thread is busy
running the job: at 1,024 actors over 16 hosts that was a fifth of what the console cost the
controller. A client now keeps the connections its GET requests used (HTTP/1.1 keep-alive; the
server keeps each open for `monarch._controller._admin` `_Handler.timeout` seconds of silence)
and sends the next GET on one of them.

Only GETs reuse a connection: a kept connection the server closed meanwhile fails the request
before an answer, and a GET is sent again on a new one; a POST (kill, stop, break) is never
sent twice, so it always gets a connection of its own.
"""

from __future__ import annotations

import http.client
import threading
import time

IDLE_S = 30.0
"""Seconds a connection may sit unused and still be reused (the server closes it after 120)."""
KEPT = 8
"""Connections a client keeps at most (the console's poll sends five requests at once)."""


class Connections:
    """Idle keep-alive connections to one `host:port` (thread-safe)."""

    def __init__(self, host: str, port: int, kept: int = KEPT, idle_s: float = IDLE_S) -> None:
        self.host, self.port = host, port
        self.kept, self.idle_s = kept, idle_s
        self._lock = threading.Lock()
        self._idle: list[tuple[float, http.client.HTTPConnection]] = []  # by _lock
        self._closed = False  # by _lock

    def new(self, timeout: float) -> http.client.HTTPConnection:
        """A connection of its own (not connected yet)."""
        return http.client.HTTPConnection(self.host, self.port, timeout=timeout)

    def take(self, timeout: float) -> tuple[http.client.HTTPConnection, bool]:
        """(a connection, whether it was kept): the newest idle one, else a new one."""
        now = time.monotonic()
        stale = []
        found = None
        with self._lock:
            while self._idle:
                since, conn = self._idle.pop()
                if now - since <= self.idle_s and conn.sock is not None:
                    found = conn
                    break
                stale.append(conn)
        for conn in stale:
            conn.close()
        if found is None:
            return self.new(timeout), False
        found.timeout = timeout
        found.sock.settimeout(timeout)  # type: ignore[union-attr]
        return found, True

    def give_back(self, conn: http.client.HTTPConnection,
                  response: http.client.HTTPResponse) -> None:
        """Keeps `conn` for the next request if its answer was read whole and the server
        leaves it open; closes it otherwise."""
        if response.will_close or not response.isclosed() or conn.sock is None:
            conn.close()
            return
        with self._lock:
            if not self._closed and len(self._idle) < self.kept:
                self._idle.append((time.monotonic(), conn))
                return
        conn.close()

    def close(self) -> None:
        """Closes the idle connections; later ones are closed when given back."""
        with self._lock:
            idle, self._idle, self._closed = self._idle, [], True
        for _, conn in idle:
            conn.close()

    def __len__(self) -> int:
        with self._lock:
            return len(self._idle)
