"""The admin server: the job's admin API over HTTP + JSON, in a thread of the controller.

Loopback on a free port by default (`MONARCH_ADMIN_ADDR=host:port` overrides; `MONARCH_ADMIN=0`
turns it off). Every request carries `Authorization: Bearer <token>`, a random token made for
this run; it is written with the address to `<run root>/<job id>/admin.json` (mode 0600, in the
user's 0700 run directory), which `monarch.admin.connect()` reads; the file goes at job end.
Answers are JSON (`{"error": ...}` with 400/401/404/409/500 when something is wrong), live
feeds are NDJSON (one record per line; an empty line is a heartbeat). A bad request never
takes the server down.
"""

from __future__ import annotations

import hmac
import json
import math
import os
import secrets
import socket
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from .._runtime._pids import start_time
from .._runtime._rundir import DISCOVERY
from .._wire._switch import switch
from . import _admin_cost
from ._admin_actions import ActionError, BadRequest
from ._admin_api import AdminApi, Binary, Params, Stream, Text, json_bytes

MAX_BODY = 1 << 20
"""Largest request body accepted (bytes)."""


def start_admin(job: Any) -> AdminServer | None:
    """Starts the job's admin server unless MONARCH_ADMIN=0; None if off or it cannot bind."""
    if not switch("MONARCH_ADMIN"):
        return None
    host, port = parse_addr(os.environ.get("MONARCH_ADMIN_ADDR", ""))
    try:
        return AdminServer(job, host, port).start()
    except OSError as exc:
        print(f"monarch: admin API not started ({host}:{port}): {exc}", file=sys.stderr)
        return None


def parse_addr(text: str) -> tuple[str, int]:
    """`host:port`, `[v6]:port`, `:port` or `host` -> (host, port); default 127.0.0.1:0."""
    text = text.strip()
    if not text:
        return "127.0.0.1", 0
    host, sep, port = text.rpartition(":")
    if not sep or "]" in port:
        host, port = text, "0"
    host = host.strip("[]") or "127.0.0.1"
    try:
        return host, int(port)
    except ValueError:
        raise ValueError(f"MONARCH_ADMIN_ADDR must be host:port, got {text!r}") from None


class _Server(ThreadingHTTPServer):
    """Serves each connection on a thread of its own; clients keep them open between requests
    (`monarch._client._pool`), so `close_connections` ends those at the job's end."""

    daemon_threads = True
    admin: AdminServer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._open: set[socket.socket] = set()  # by _open_lock
        self._open_lock = threading.Lock()

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._open_lock:
            self._open.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def close_connections(self) -> None:
        """Ends every open connection (a handler waiting for a kept one's next request
        returns at once)."""
        with self._open_lock:
            found = list(self._open)
        for sock in found:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        self.admin.errors += 1  # a client that vanished mid-answer: nothing to report


class _Server6(_Server):
    address_family = socket.AF_INET6


class AdminServer:
    """A running admin server of one job. `start()` it, `close()` it at job end."""

    def __init__(self, job: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        self.job = job
        self.token = secrets.token_urlsafe(32)
        cls = _Server6 if ":" in host else _Server
        self._httpd = cls((host, port), _Handler)
        self._httpd.admin = self
        self.costs = _admin_cost.Costs()
        self.api = AdminApi(job, lambda: self.address, self.costs)
        self.discovery: Path = Path(job.run_dir) / DISCOVERY
        self.errors = 0
        self.last_request = -math.inf
        """`time.monotonic()` of the last authorized request (the job counts as watched a
        while after one: `_watched`)."""
        self._wrote = False  # only the server that wrote the discovery file removes it
        self._closing = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        """`host:port` it listens on."""
        host, port = self._httpd.server_address[:2]
        host = host.decode() if isinstance(host, bytes) else str(host)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def closing(self) -> bool:
        """True once `close` began (live feeds end)."""
        return self._closing.is_set()

    def start(self) -> AdminServer:
        """Serves from a daemon thread and writes the discovery file."""
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.5,),
                                        name="monarch-admin", daemon=True)
        self._thread.start()
        self._write_discovery()
        return self

    def _write_discovery(self) -> None:
        info = {"address": self.address, "token": self.token, "pid": os.getpid(),
                "pid_start": start_time(os.getpid()), "job_id": self.job.job_id, "started": self.job.started,
                "hostname": self.job.hostname, "run_dir": str(self.job.run_dir),
                "version": 1}
        tmp = self.discovery.with_name(f".{DISCOVERY}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(info, f)
        os.replace(tmp, self.discovery)
        self._wrote = True

    def close(self) -> None:
        """Removes the discovery file, ends live feeds and stops serving."""
        self._closing.set()
        if self._wrote:
            self.discovery.unlink(missing_ok=True)
        if self._thread is not None:  # shutdown() waits for serve_forever: only if it runs
            self._httpd.shutdown()
            self._thread.join(timeout=5)
        self._httpd.server_close()
        self._httpd.close_connections()

    def authorized(self, header: str | None) -> str | None:
        """None if the Authorization header carries the token, else why not."""
        if not header:
            return ("missing token: send 'Authorization: Bearer <token>' (the token is in "
                    f"{self.discovery})")
        scheme, _, token = header.strip().partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(),
                                                                 self.token.encode()):
            return "invalid token for this job's admin API"
        return None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "monarch-admin/1"
    timeout = 120  # an idle keep-alive connection is closed after this
    server: _Server

    def do_GET(self) -> None:
        self._dispatch("GET")

    def do_POST(self) -> None:
        self._dispatch("POST")

    def do_PUT(self) -> None:
        self._dispatch("PUT")

    def do_DELETE(self) -> None:
        self._dispatch("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: the controller's stderr belongs to the user

    def send_error(self, code: int, message: str | None = None,
                   explain: str | None = None) -> None:
        """http.server's own refusals (bad request line, headers) as JSON too."""
        self.close_connection = True
        self.request_version = "HTTP/1.0"  # garbage parses as HTTP/0.9, which has no status
        self._json(code, {"error": message or explain or "bad request"})

    def _dispatch(self, method: str) -> None:
        _admin_cost.take_io()  # nothing of an earlier request on this connection's thread
        started = time.thread_time()
        url = urlsplit(self.path)
        key = (method, url.path.rstrip("/") or "/")
        try:
            self._route(key, url)
        finally:
            spent = time.thread_time() - started
            known = key in self.server.admin.api.routes
            self.server.admin.costs.add(" ".join(key) if known else "other", spent,
                                        _admin_cost.take_io())

    def _route(self, key: tuple[str, str], url: Any) -> None:
        admin = self.server.admin
        method = key[0]
        try:
            refusal = admin.authorized(self.headers.get("Authorization"))
            if refusal is not None:
                self.close_connection = True  # its body (if any) stays unread
                self._json(401, {"error": refusal})
                return
            admin.last_request = time.monotonic()
            body = self._body()
            route = admin.api.routes.get(key)
            if route is None:
                self._no_route(method, url.path)
                return
            params = dict(parse_qsl(url.query))
            params.update(body)
            self._answer(route(Params(params)))
        except ActionError as exc:
            self._json(exc.status, {"error": str(exc)})
        except TimeoutError as exc:
            self._json(504, {"error": f"the job did not answer in time: {exc}"})
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:
            admin.errors += 1
            self._json(500, {"error": f"{type(exc).__name__}: {exc}"})

    def _body(self) -> dict[str, Any]:
        length = self.headers.get("Content-Length")
        if not length:
            return {}
        try:
            n = int(length)
        except ValueError:
            raise BadRequest("bad Content-Length") from None
        if n < 0 or n > MAX_BODY:
            self.close_connection = True
            raise BadRequest(f"request body must be at most {MAX_BODY} bytes")
        raw = self.rfile.read(n)
        if not raw.strip():
            return {}
        try:
            body = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise BadRequest(f"the body is not JSON: {exc}") from None
        if not isinstance(body, dict):
            raise BadRequest("the body must be a JSON object")
        return body

    def _no_route(self, method: str, path: str) -> None:
        paths = {p for _, p in self.server.admin.api.routes}
        if path.rstrip("/") in paths:
            self._json(405, {"error": f"{method} is not allowed on {path}"})
        else:
            self._json(404, {"error": f"no such endpoint {path}; GET /v1 lists them"})

    def _answer(self, result: Any) -> None:
        if isinstance(result, Stream):
            self._stream(result)
        elif isinstance(result, Text):
            self._send(200, result.body.encode(), result.content_type)
        elif isinstance(result, Binary):
            self._send(200, result.body, result.content_type)
        else:
            self._json(200, result)

    def _json(self, code: int, value: Any) -> None:
        data = json_bytes(value)
        self._send(code, data, "application/json")

    def _send(self, code: int, data: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def _stream(self, stream: Stream) -> None:
        admin = self.server.admin
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/x-ndjson")
        self.send_header("Cache-Control", "no-store")
        self.send_header("Connection", "close")
        self.end_headers()
        try:
            for batch in stream.batches(lambda: admin.closing):
                lines = [json.dumps(item, default=str) for item in batch]
                self.wfile.write(("\n".join(lines) + "\n").encode())  # "\n" alone: heartbeat
                self.wfile.flush()
        except OSError:
            pass  # the client left
        finally:
            stream.subscription.close()

