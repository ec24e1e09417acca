"""The admin client keeps its GETs' connections open and reuses them (`monarch._client._pool`);
a POST is never sent on a kept connection; the server ends kept connections when it closes."""

from __future__ import annotations

import socket

import pytest
from waiting import wait_until

from monarch._controller._admin import AdminServer
from monarch.admin import AdminClient, AdminError, AuthError

pytestmark = pytest.mark.timeout(60)


class _FakeJob:
    def __init__(self, run_dir):
        self.run_dir, self.job_id, self.started, self.hostname = run_dir, "fake", 1.0, "h"
        self.store = None


@pytest.fixture
def server(tmp_path):
    server = AdminServer(_FakeJob(tmp_path)).start()
    yield server
    server.close()


def _open(server: AdminServer) -> int:
    """Connections the server holds open now."""
    with server._httpd._open_lock:
        return len(server._httpd._open)


def _kept(client: AdminClient):
    """The client's one kept connection."""
    assert len(client._connections) == 1
    return client._connections._idle[-1][1]


def test_gets_share_one_kept_connection(server):
    client = AdminClient(server.address, server.token)
    client._get("/v1")
    where = _kept(client).sock.getsockname()
    for _ in range(5):
        assert "GET /v1/topology" in client._get("/v1")["routes"]
    assert _kept(client).sock.getsockname() == where
    assert _open(server) == 1  # one connection, one handler thread
    client.close()
    assert len(client._connections) == 0
    wait_until(lambda: _open(server) == 0, "the server to see the client close")
    assert client._get("/v1")["routes"]  # a closed client still works, on new connections


def test_a_get_is_sent_again_when_the_server_closed_the_kept_connection(server):
    client = AdminClient(server.address, server.token)
    client._get("/v1")
    old = _kept(client).sock.getsockname()
    server._httpd.close_connections()  # as a server that dropped an idle connection
    wait_until(lambda: _open(server) == 0, "the server to drop it")
    assert client._get("/v1")["routes"]
    assert _kept(client).sock.getsockname() != old


def test_a_post_never_goes_on_a_kept_connection(server):
    client = AdminClient(server.address, server.token)
    client._get("/v1")
    kept = _kept(client)
    with pytest.raises(AdminError, match="missing parameter 'mesh'"):
        client._post("/v1/kill")
    assert _kept(client) is kept  # the POST had a connection of its own, closed after
    wait_until(lambda: _open(server) == 1, "the POST's connection to end")
    assert client._get("/v1")["routes"] and _kept(client) is kept


def test_refused_and_idle_connections_are_not_kept(server):
    refused = AdminClient(server.address, "wrong")
    with pytest.raises(AuthError):
        refused._get("/v1")
    assert len(refused._connections) == 0  # the server closes a refused connection
    client = AdminClient(server.address, server.token)
    client._get("/v1")
    old = _kept(client)
    client._connections.idle_s = -1.0  # idle too long: closed, not reused
    client._get("/v1")
    assert _kept(client) is not old and old.sock is None


def test_closing_the_server_ends_kept_connections(tmp_path):
    server = AdminServer(_FakeJob(tmp_path)).start()
    client = AdminClient(server.address, server.token)
    client._get("/v1")
    sock = _kept(client).sock
    server.close()
    sock.settimeout(10)
    assert sock.recv(1) == b""  # the server's end is gone, not waiting for a next request
    with pytest.raises(AdminError, match="cannot reach the admin API"):
        client._get("/v1")


def test_a_kept_connection_answers_a_raw_second_request(server):
    """HTTP/1.1 keep-alive as any client sees it: two requests on one socket."""
    host, port = server.address.rsplit(":", 1)
    request = (f"GET /v1 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {server.token}\r\n"
               "\r\n").encode()
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        for _ in range(2):
            sock.sendall(request)
            head = b""
            while b"\r\n\r\n" not in head:
                head += sock.recv(4096)
            assert head.startswith(b"HTTP/1.1 200")
            length = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
            body = head.split(b"\r\n\r\n", 1)[1]
            while len(body) < length:
                body += sock.recv(4096)
            assert b"GET /v1/topology" in body
