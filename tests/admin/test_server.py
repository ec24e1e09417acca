"""The admin server: discovery, authentication, refusals of garbage, never a crash."""

from __future__ import annotations

import json
import os
import socket
import stat

import pytest

from monarch._controller._admin import AdminServer, parse_addr, start_admin
from monarch.admin import AdminClient, AuthError, NoJobError, connect, discover

pytestmark = pytest.mark.timeout(60)


def test_discovery_file_is_private_and_complete(job):
    path = job.run_dir / "admin.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(job.run_dir.parent.stat().st_mode) == 0o700
    info = json.loads(path.read_text())
    assert info["address"] == job.admin.address and info["address"].startswith("127.0.0.1:")
    assert info["token"] == job.admin.token and len(info["token"]) >= 32
    assert info["pid"] == os.getpid() and info["job_id"] == job.job_id
    assert info["hostname"] == socket.gethostname() and info["started"] == job.started
    assert any(i["job_id"] == job.job_id for i in discover())
    client = connect(job=job.job_id)
    assert client.job()["job_id"] == job.job_id
    with pytest.raises(NoJobError, match="no running job 'nope'"):
        connect(job="nope")


def test_missing_or_wrong_token_is_refused_with_401(raw, job):
    status, body = raw("GET", "/v1/job", token=None)
    assert status == 401 and "missing token" in body["error"]
    status, body = raw("GET", "/v1/job", token="wrong")
    assert status == 401 and body["error"] == "invalid token for this job's admin API"
    status, body = raw("GET", "/v1/nowhere", headers={"Authorization": "Basic abc"},
                       token=None)
    assert status == 401
    status, body = raw("POST", "/v1/kill", b'{"mesh": "x"}', token="wrong")
    assert status == 401  # before anything is done
    with pytest.raises(AuthError, match="invalid token"):
        AdminClient(job.admin.address, "wrong").topology()


def test_garbage_gets_400_and_the_server_goes_on(raw, job):
    status, body = raw("POST", "/v1/kill", b"{not json")
    assert status == 400 and "not JSON" in body["error"]
    status, body = raw("POST", "/v1/kill", b"[1, 2]")
    assert status == 400 and "JSON object" in body["error"]
    status, body = raw("GET", "/v1/logs?rank=abc")
    assert status == 400 and "'rank' must be a number" in body["error"]
    status, body = raw("POST", "/v1/kill", b"{}")
    assert status == 400 and "missing parameter 'mesh'" in body["error"]
    status, body = raw("GET", "/v1/spans?trace_id=xyz")
    assert status == 400 and "hex" in body["error"]
    host, port = job.admin.address.rsplit(":", 1)
    for junk in (b"\x00\xff\xfe garbage\r\n\r\n", b"GET\r\n\r\n", b"\x16\x03\x01\x02\x00" * 50):
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)  # no newline in TLS junk: end of input ends the line
            reply = sock.recv(4096)
        assert reply.split(b" ")[1] == b"400", reply
    status, body = raw("GET", "/v1/job")
    assert status == 200 and body["job_id"] == job.job_id


def test_unknown_endpoint_404_and_wrong_method_405(raw):
    status, body = raw("GET", "/v1/nothing-here")
    assert status == 404 and "GET /v1 lists them" in body["error"]
    status, body = raw("GET", "/v1/kill")
    assert status == 405
    status, body = raw("GET", "/v1")
    assert status == 200 and "POST /v1/kill" in body["routes"]


def test_parse_addr():
    assert parse_addr("") == ("127.0.0.1", 0)
    assert parse_addr("0.0.0.0:8123") == ("0.0.0.0", 8123)
    assert parse_addr(":9000") == ("127.0.0.1", 9000)
    assert parse_addr("[::1]:9001") == ("::1", 9001)
    with pytest.raises(ValueError, match="host:port"):
        parse_addr("localhost:http")


class _FakeJob:
    def __init__(self, run_dir):
        self.run_dir, self.job_id, self.started, self.hostname = run_dir, "fake", 1.0, "h"
        self.store = None


def test_admin_addr_and_switch_from_the_environment(tmp_path, monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("MONARCH_ADMIN_ADDR", f"127.0.0.1:{port}")
    server = start_admin(_FakeJob(tmp_path))
    assert isinstance(server, AdminServer) and server.address == f"127.0.0.1:{port}"
    try:
        assert json.loads((tmp_path / "admin.json").read_text())["address"] == server.address
        routes = AdminClient(server.address, server.token)._get("/v1")["routes"]
        assert "GET /v1/topology" in routes
    finally:
        server.close()
    assert not (tmp_path / "admin.json").exists()
    monkeypatch.setenv("MONARCH_ADMIN", "0")
    assert start_admin(_FakeJob(tmp_path)) is None
