"""The admin API client: how `monarch status`, `monarch top` and scripts reach a running job
(the public `monarch.admin` re-exports it).

    from monarch.admin import connect
    client = connect()                     # this user's newest running job on this host
    client.topology()["meshes"]
    client.kill("trainers", "gpus=0:2")     # SIGKILL those ranks' processes
    for line in client.follow_logs("trainers", rank=1): print(line["text"])

Every call returns plain JSON-able data (dicts, lists, str). Failures raise `AdminError` (its
`status` is the HTTP status, None when the job could not be reached). Jobs are found through
`<run root>/<job id>/admin.json` (mode 0600), which holds the address and the per-run token.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from collections.abc import Collection
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

from .._runtime._pids import pid_alive, this_host
from ._pool import Connections
from ..telemetry import _topology_delta
from .._runtime._rundir import DISCOVERY, run_root_path

DEFAULT_TIMEOUT = 30.0
"""Seconds a request may take (live feeds: the longest silence, the server beats every 1 s)."""


class AdminError(Exception):
    """The admin API refused a request or could not be reached; the message says why.

    Attributes:
        status: the HTTP status (400 bad request, 404 unknown mesh/proc, 409 not possible now,
            504 the job did not answer), or None when the job could not be reached at all.
    """

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class AuthError(AdminError):
    """The token was missing or wrong (401): use the token of this job's admin.json."""


class NoJobError(AdminError):
    """No running job was found (or not the one asked for): start one, or pass addr/token."""


def discover(job: str | None = None) -> list[dict[str, Any]]:
    """The discovery infos of this user's live jobs on this host, newest first.

    Args:
        job: only this job id.
    """
    root = run_root_path()
    paths = [root / job / DISCOVERY] if job else sorted(root.glob(f"*/{DISCOVERY}"))
    infos = [info for info in map(_read_info, paths) if info is not None and _alive(info)]
    return sorted(infos, key=lambda i: i.get("started", 0), reverse=True)


def _read_info(path: Path) -> dict[str, Any] | None:
    try:
        info = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return info if isinstance(info, dict) and "address" in info and "token" in info else None


def _alive(info: dict[str, Any]) -> bool:
    """Whether the job of a discovery file runs on this host (one of another host, with a
    shared run root, is not listed: its admin address is that host's)."""
    if not this_host(info.get("hostname")):
        return False
    try:
        pid = int(info["pid"])
    except (KeyError, TypeError, ValueError):
        return True  # no pid to check: the connection will tell
    start = info.get("pid_start")
    return pid_alive(pid, None if start is None else str(start))


def host_port(address: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`, `:port` for 127.0.0.1) as (host, port).

    Raises:
        ValueError: not that shape, or a port outside 1-65535.
    """
    host, sep, port = address.strip().rpartition(":")
    try:
        number = int(port) if sep and "]" not in port else -1
    except ValueError:
        number = -1
    if not 0 < number < 65536:
        raise ValueError(f"not a host:port address: {address!r} (e.g. 127.0.0.1:41733; "
                         "`monarch jobs` lists the running jobs)")
    return host.strip("[]") or "127.0.0.1", number


def connect(addr: str | None = None, token: str | None = None,
            job: str | None = None) -> AdminClient:
    """A client of a running job's admin API.

    Args:
        addr: `host:port` of the admin API; default: found in the run directory.
        token: its token; default: `$MONARCH_ADMIN_TOKEN`, else the discovery file's.
        job: a job id, when several run (default: the newest live one).

    Raises:
        NoJobError: no running job was found (or not `job`, or none at `addr`).
        ValueError: `addr` is not a host:port address.
    """
    token = token or os.environ.get("MONARCH_ADMIN_TOKEN") or None
    if addr:
        host_port(addr)  # a typo is a ValueError saying so, before any lookup
    if addr and token:
        return AdminClient(addr, token)
    infos = discover(job)
    if addr:
        infos = [i for i in infos if i["address"] == addr]
    if not infos:
        raise NoJobError(_no_job_message(addr, job))
    info = infos[0]
    return AdminClient(info["address"], token or info["token"], info)


def _no_job_message(addr: str | None, job: str | None) -> str:
    where = run_root_path()
    if addr:
        return f"no token for {addr}: pass --token (or MONARCH_ADMIN_TOKEN)"
    if job:
        return f"no running job {job!r} in {where}"
    return (f"no running monarch job found in {where} (start a script that uses monarch, "
            "or pass --addr and --token)")


class Stream:
    """A live NDJSON feed: iterate for dicts; `close()` (any thread) ends it."""

    def __init__(self, conn: http.client.HTTPConnection, sock: Any,
                 response: http.client.HTTPResponse) -> None:
        self._conn, self._sock, self._response = conn, sock, response
        self._lock = threading.Lock()
        self._closed = False  # guarded by _lock, like _reading
        self._reading = False  # a thread is in next(): it releases the connection

    def __iter__(self) -> Stream:
        return self

    def __next__(self) -> dict[str, Any]:
        with self._lock:
            if self._closed:
                raise StopIteration
            self._reading = True
        try:
            record = self._next_record()
        finally:
            with self._lock:
                self._reading = False
                closed = self._closed
            if closed:
                self._release()
        if record is None:
            raise StopIteration
        return record

    def _next_record(self) -> dict[str, Any] | None:
        while not self._closed:
            try:
                line = self._response.readline()
            except (OSError, ValueError, AttributeError, http.client.HTTPException) as exc:
                if self._closed:
                    return None
                self.close()
                raise AdminError(f"the live feed broke: {exc}") from None
            if not line:
                self.close()
                return None
            if line.strip():
                return json.loads(line)
        return None

    def close(self) -> None:
        """Ends the feed (a thread blocked in `next()` returns)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            reading = self._reading
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        if not reading:
            self._release()

    def _release(self) -> None:
        self._response.close()
        self._conn.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AdminClient:
    """Talks to one job's admin API. Thread-safe: each request has a connection to itself,
    and GETs reuse the ones earlier GETs left open (`_pool`; `close()` ends them).

    Args:
        address: `host:port` (or `[v6]:port`).
        token: the job's admin token.
        info: the discovery info it came from, if any.
        timeout: seconds a request may take.
    """

    def __init__(self, address: str, token: str, info: dict[str, Any] | None = None,
                 timeout: float = DEFAULT_TIMEOUT) -> None:
        self.address = address
        self.token = token
        self.info = info or {"address": address}
        self.timeout = timeout
        self._host, self._port = host_port(address)
        self._connections = Connections(self._host, self._port)

    def close(self) -> None:
        """Closes the connections kept open for the next requests (the client still works:
        later requests open new ones)."""
        self._connections.close()

    def __enter__(self) -> AdminClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"AdminClient({self.address!r}, job={self.info.get('job_id')!r})"

    # -- reading ---------------------------------------------------------------------------
    def job(self) -> dict[str, Any]:
        """job_id, pid, hostname, address, started, uptime_s, health (ok/degraded/failed),
        counts (hosts, procs, procs_live, meshes, actors, failures)."""
        return self._get("/v1/job")

    def topology(self, since: dict[str, Any] | None = None,
                 rows: Collection[str] | None = None) -> dict[str, Any]:
        """`{"hosts": [{id, hostname, procs: [...]}], "meshes": [{..., actors: [...]}],
        "failures": [...], "services": [...], "version": ...}` with state, pid and counters; a
        service is {name, router, router_proc, state, replicas: [{replica, generation, mesh,
        state, outstanding, routed}], replaced: [...], healthy, load, retried}, and a mesh that
        is a replica carries `service` (name, replica, generation, state, outstanding, routed,
        current).

        Args:
            since: a topology this method returned before (a poller's last one): the job then
                sends only what changed since, and the answer is put together from it, sharing
                the parts that did not change (change neither). The same topology either way.
            rows: the meshes (ids or names) whose every actor is wanted, or
                ``"<mesh id>@<host id>"`` for a mesh's actors on that host (what a console
                asks for when a mesh of a thousand ranks is open on one host); any other mesh
                comes folded: `actors` holds only its actors that are not simply running
                (failed, stopped, starting, stalled) and those on the hosts asked
                (`open_hosts`), `folded` a summary by host id (actors, states, messages,
                queue_depth, latency_p50_ms, last_method, stalled) and `rank_procs` each
                rank's proc as [rank, proc] pairs. None (the default): every actor. What a
                console asks for when it shows a thousand actors' meshes folded.

        Raises:
            TypeError: `rows` is a string (a mesh's name is one item: pass `[name]`).
            ValueError: an item of `rows` holds a comma (ask by the mesh's id instead).
        """
        if isinstance(rows, str):
            raise TypeError(f"rows must be a collection of mesh ids or names, not the string "
                            f"{rows!r} (pass [{rows!r}])")
        if rows is not None and any("," in str(r) for r in rows):
            raise ValueError(f"rows names meshes by id or name without a comma, got "
                             f"{sorted(map(str, rows))!r}")
        version = since.get("version") if since else None
        fold: dict[str, Any] = {}
        if rows is not None:
            fold = {"fold": "1", "rows": ",".join(sorted(map(str, rows))) or None}
        answer = self._get("/v1/topology", since=version, **fold)
        if since is None or "since" not in answer:
            return answer
        try:
            return _topology_delta.apply(answer, since)
        except _topology_delta.DeltaError:  # `since` was changed: the whole topology again
            return self._get("/v1/topology", **fold)

    def logs(self, mesh: str | None = None, rank: int | None = None, text: str | None = None,
             since_hlc: int | None = None, limit: int = 500) -> list[dict[str, Any]]:
        """Log lines in HLC order (the last `limit`, or the first after `since_hlc`); each
        with hlc, time, stream, level, text, mesh, rank, proc, host."""
        return self._get("/v1/logs", mesh=mesh, rank=rank, text=text, since_hlc=since_hlc,
                         limit=limit)

    def follow_logs(self, mesh: str | None = None, rank: int | None = None,
                    history: int = 0) -> Stream:
        """Log lines as they reach the controller (after the last `history` ones)."""
        return self._stream("/v1/logs/follow", mesh=mesh, rank=rank, history=history)

    def spans(self, trace_id: str | None = None, mesh: str | None = None,
              limit: int = 200) -> list[dict[str, Any]]:
        """The spans of one trace (hex id), or the newest `limit` (of `mesh`), oldest first."""
        return self._get("/v1/spans", trace_id=trace_id, mesh=mesh, limit=limit)

    def metrics(self, by_process: bool = False) -> list[dict[str, Any]]:
        """Every metric series' current value (summed over processes unless `by_process`)."""
        return self._get("/v1/metrics", by_process=int(by_process))

    def prometheus(self) -> str:
        """The Prometheus exposition text of `/metrics`."""
        return self._request("GET", "/metrics")[1].decode()

    def transfers(self, window: float = 10.0) -> dict[str, Any]:
        """Bytes/s per link, mesh and kind over `window` s, each with a 60 s history."""
        return self._get("/v1/transfers", window=window)

    def failures(self) -> list[dict[str, Any]]:
        """Every failure of the job, oldest first."""
        return self._get("/v1/failures")

    def subscribe(self, kinds: Any = ("span", "log", "metric", "transfer", "failure")) -> Stream:
        """Records of `kinds` as the controller receives them (dicts with a `kind`)."""
        kinds = [kinds] if isinstance(kinds, str) else list(kinds)
        return self._stream("/v1/subscribe", kinds=",".join(kinds))

    def trace(self, mesh: str | None = None, limit: int = 100_000) -> dict[str, Any]:
        """The stored spans as a Chrome/Perfetto trace (`{"traceEvents": [...]}`)."""
        return self._get("/v1/trace", mesh=mesh, limit=limit)

    def stats(self) -> dict[str, Any]:
        """The store's counters (``store``: held records and bytes, ingested, evicted,
        subscribers...), the history's (``history``: files, bytes, records lost before
        they were written; None when the job keeps none) and what the admin API cost the
        controller (``admin``: by route, requests and CPU seconds on the thread that served
        them, ``cpu_s``, and on the controller's I/O thread, ``io_s``)."""
        return self._get("/v1/stats")

    def query(self, sql: str, limit: int | None = None, schema: str = "pymonarch",
              retention_s: float | None = None, timeout: float = 120.0) -> Any:
        """Runs SQL (Apache DataFusion) over the job's telemetry tables (``actors``,
        ``actor_status_events``, ``messages``, ``spans``, ``logs``, ``metrics``,
        ``transfers``, ``failures``; columns in docs/QUERY.md) and returns a pyarrow Table.
        ``schema="monarch"``: torchmonarch's tables instead (``actors``, ``meshes``,
        ``messages``, ``sent_messages``, ``metric_sums``, ...; docs/QUERY.md), of the last
        ``retention_s`` seconds. A statement the engine refuses raises AdminError (status
        400) with its message; one that takes longer than ``timeout`` seconds, AdminError."""
        import pyarrow as pa

        payload = self._request("POST", "/v1/query", body={
            "sql": sql, "limit": limit, "schema": schema, "retention_s": retention_s},
            timeout=timeout)[1]
        return pa.ipc.open_stream(payload).read_all()

    def store_pyspy_dump(self, dump_id: str, proc_ref: str,
                         pyspy_result_json: str) -> dict[str, Any]:
        """Keeps a py-spy dump (its JSON) for SQL: Monarch's ``pyspy_dumps``,
        ``pyspy_stack_traces``, ``pyspy_frames`` and ``pyspy_local_variables`` tables."""
        return json.loads(self._request("POST", "/v1/pyspy", body={
            "dump_id": dump_id, "proc_ref": proc_ref,
            "pyspy_result_json": pyspy_result_json})[1])

    def actor(self, mesh: str, rank: int, limit: int = 64) -> dict[str, Any]:
        """One actor: state, counters, what it runs now (``running``: method, running_s,
        caller, trace_id, stalled), what waits (``queued_methods``), its flight recorder
        (``recent``: the last messages it handled, newest first) and its status events."""
        return self._get("/v1/actor", mesh=mesh, rank=rank, limit=limit)

    # -- actions ---------------------------------------------------------------------------
    def kill(self, mesh: str, selection: str = "", sig: str = "KILL") -> dict[str, Any]:
        """Signals (SIGKILL by default) the processes of the selected ranks of `mesh` (a mesh
        name or id, or a proc mesh id); `selection` like `gpus=0:2` or `` for all. Returns
        `{"mesh", "signal", "killed": [{rank, proc, pid, host}], "skipped": [...]}`."""
        return self._post("/v1/kill", mesh=mesh, selection=selection, sig=sig)

    def stop(self, mesh: str, selection: str = "", timeout: float | None = None
             ) -> dict[str, Any]:
        """Stops the processes of the selected ranks gracefully (`__cleanup__` runs) and waits
        for them; `{"mesh", "done", "stopped": [...]}`."""
        return self._post("/v1/stop", mesh=mesh, selection=selection, timeout=timeout,
                          _timeout=(timeout or 60.0) + 30)

    def stack(self, proc: str) -> str:
        """A py-spy dump of the proc's threads (`controller` for the controller)."""
        return self._request("POST", "/v1/stack", body={"proc": proc}, timeout=90)[1].decode()

    def stacks(self, mesh: str, selection: str = "") -> dict[str, Any]:
        """What each selected actor of `mesh` runs now, ranks grouped by identical stack, the
        odd ones out first: `{"mesh", "name", "groups": [{ranks, summary, running, frames,
        error}]}` (frames: [file, line, function], outermost first; none: idle)."""
        return self._get("/v1/stacks", 60.0, mesh=mesh, selection=selection)

    def diagnose(self) -> dict[str, Any]:
        """Pings every live proc: `{"ok", "checks": [{proc, latency_ms, status}], "dead"}`."""
        return self._get("/v1/diagnose")

    def break_next(self, mesh: str, rank: int) -> dict[str, Any]:
        """Makes that actor stop in pdb at its next message (a debug session opens)."""
        return self._post("/v1/break_next", mesh=mesh, rank=rank)

    # -- debugger (monarch._actors._debug_shell.DebugBackend) -------------------------------------
    def sessions(self) -> list[dict[str, Any]]:
        """Open debug sessions: id, actor_name, rank, coords, hostname, function, lineno."""
        return self._get("/v1/debug/sessions")

    def send(self, session_id: int, line: str) -> bool:
        """Types one line into a session's pdb."""
        try:
            return bool(self._post("/v1/debug/send", session_id=session_id, line=line)["sent"])
        except AdminError as exc:
            if exc.status == 404:
                return False
            raise

    def read(self, session_id: int, offset: int, timeout: float) -> tuple[str, int, bool]:
        """pdb output after `offset`, waiting up to `timeout` s: (text, new offset, closed)."""
        out = self._get("/v1/debug/read", session_id=session_id, offset=offset,
                        timeout=timeout, _timeout=timeout + 45)
        return out["text"], out["offset"], out["closed"]

    def continue_all(self) -> int:
        """Clears breakpoints and continues every session; returns how many."""
        return int(self._post("/v1/debug/continue")["continued"])

    def cast(self, actor_name: str, ranks: list[int] | None, line: str) -> list[int]:
        """Types `line` into the sessions of `actor_name` at `ranks` (None: all)."""
        return self._post("/v1/debug/cast", actor_name=actor_name, ranks=ranks,
                          line=line)["sessions"]

    # -- plumbing --------------------------------------------------------------------------
    def _get(self, path: str, _timeout: float | None = None, **params: Any) -> Any:
        query = {k: v for k, v in params.items() if v is not None}
        if query:
            path += "?" + urlencode(query)
        return json.loads(self._request("GET", path, timeout=_timeout)[1])

    def _post(self, path: str, _timeout: float | None = None, **body: Any) -> Any:
        body = {k: v for k, v in body.items() if v is not None}
        return json.loads(self._request("POST", path, body=body, timeout=_timeout)[1])

    def _connection(self, timeout: float | None) -> http.client.HTTPConnection:
        return self._connections.new(timeout or self.timeout)

    def _headers(self, body: bytes | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/json"
        return headers

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None,
                 timeout: float | None = None) -> tuple[int, bytes]:
        if body is not None:
            body = {k: v for k, v in body.items() if v is not None}
        data = json.dumps(body).encode() if body is not None else None
        if method == "GET":
            conn, kept = self._connections.take(timeout or self.timeout)
        else:  # never sent twice: a connection of its own
            conn, kept = self._connection(timeout), False
        try:
            try:
                response, payload = self._exchange(conn, method, path, data)
            except (ConnectionError, http.client.RemoteDisconnected,
                    http.client.BadStatusLine):
                if not kept:
                    raise
                # the server closed the kept connection meanwhile: the GET once more, anew
                conn.close()
                conn, kept = self._connection(timeout), False
                response, payload = self._exchange(conn, method, path, data)
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise self._unreachable(exc) from None
        if method == "GET":
            self._connections.give_back(conn, response)
        else:
            conn.close()
        if response.status >= 400:
            raise _error(response.status, payload)
        return response.status, payload

    def _exchange(self, conn: http.client.HTTPConnection, method: str, path: str,
                  data: bytes | None) -> tuple[http.client.HTTPResponse, bytes]:
        conn.request(method, path, data, self._headers(data))
        response = conn.getresponse()
        return response, response.read()

    def _stream(self, path: str, **params: Any) -> Stream:
        query = {k: v for k, v in params.items() if v is not None}
        conn = self._connection(None)
        try:
            conn.request("GET", f"{path}?{urlencode(query)}", None, self._headers(None))
            sock = conn.sock
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            conn.close()
            raise self._unreachable(exc) from None
        if response.status >= 400:
            payload = response.read()
            conn.close()
            raise _error(response.status, payload)
        return Stream(conn, sock, response)

    def _unreachable(self, exc: BaseException) -> AdminError:
        return AdminError(f"cannot reach the admin API at {self.address}: "
                          f"{type(exc).__name__}: {exc} (is the job still running?)")


def _error(status: int, payload: bytes) -> AdminError:
    try:
        message = json.loads(payload)["error"]
    except (ValueError, KeyError, TypeError):
        message = payload.decode(errors="replace")[:500] or f"HTTP {status}"
    return (AuthError if status == 401 else AdminError)(str(message), status)


def wait_for_job(job: str | None = None, timeout: float = 30.0) -> AdminClient:
    """`connect(job=job)`, retried until a job is up or `timeout` s pass (tools, tests)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return connect(job=job)
        except NoJobError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
