"""The admin API of this test session's own job (the pytest process is the controller)."""

from __future__ import annotations

import http.client
import json
import logging
from typing import Any

import pytest

from monarch.actor import Actor, context, endpoint


class Echo(Actor):
    """Prints, logs and answers; module level so procs can unpickle it."""

    @endpoint
    def ping(self, x: int) -> int:
        rank = context().actor_instance.rank.rank
        print(f"echo {x} from {rank}", flush=True)
        logging.getLogger("echo").warning("warned %s from %s", x, rank)
        return x


@pytest.fixture(scope="session")
def job(procs: Any) -> Any:
    from monarch._controller._job import current_job

    running = current_job()
    assert running is not None and running.admin is not None
    return running


@pytest.fixture(scope="session")
def admin(job: Any) -> Any:
    from monarch.admin import AdminClient

    return AdminClient(job.admin.address, job.admin.token)


@pytest.fixture
def raw(job: Any) -> Any:
    """`raw(method, path, body=None, token=...)` -> (status, parsed JSON) over http.client."""
    host, port = job.admin.address.rsplit(":", 1)

    def request(method: str, path: str, body: bytes | None = None,
                token: str | None = job.admin.token,
                headers: dict[str, str] | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection(host, int(port), timeout=30)
        all_headers = dict(headers or {})
        if token is not None:
            all_headers["Authorization"] = f"Bearer {token}"
        try:
            conn.request(method, path, body, all_headers)
            response = conn.getresponse()
            data = response.read()
        finally:
            conn.close()
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, data.decode(errors="replace")

    return request


@pytest.fixture(scope="session")
def echo_class() -> type:
    return Echo
