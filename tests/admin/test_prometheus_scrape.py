"""A real Prometheus (Debian's package, started here) scrapes the job and answers PromQL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request

import pytest
from waiting import wait_until

from monarch._controller._exporters import start_exporters

pytestmark = pytest.mark.timeout(300)


def prometheus_binary() -> str:
    """Debian's prometheus, which `.ci/install` installs."""
    found = shutil.which("prometheus")
    if not found:
        pytest.skip("prometheus is not installed (bash .ci/install installs it)")
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def promql(port: int, query: str) -> list:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": query})
    with urllib.request.urlopen(url, timeout=10) as response:
        body = json.loads(response.read())
    assert body["status"] == "success", body
    return body["data"]["result"]


def until(ask, good, timeout: float = 120.0) -> list:
    """Asks again (every 0.2 s) until the answer is good, and returns it; fails showing the
    last answer."""
    last: list = [None]

    def answered() -> bool:
        last[0] = ask()
        return bool(good(last[0]))

    wait_until(answered, lambda: f"a good answer; the last was {last[0]}", timeout, 0.2)
    return last[0]


def test_prometheus_scrapes_the_job_and_finds_its_counters(job, procs, echo_class, tmp_path,
                                                           monkeypatch):
    binary = prometheus_binary()
    monkeypatch.setenv("MONARCH_METRICS_PORT", str(free_port()))
    exporters = start_exporters(job)  # the job's own wiring, with the variable set
    assert exporters.metrics is not None and exporters.otlp is None
    mesh = procs.spawn("promtest", echo_class)
    for i in range(5):
        mesh.ping.call(i).get(timeout=30)
    token_file = tmp_path / "token"
    token_file.write_text(job.admin.token)
    token_file.chmod(0o600)
    config = tmp_path / "prometheus.yml"
    metrics_host, metrics_port = exporters.metrics.address
    config.write_text(f"""
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: monarch-admin
    metrics_path: /metrics
    authorization:
      type: Bearer
      credentials_file: {token_file}
    static_configs:
      - targets: ["{job.admin.address}"]
  - job_name: monarch-metrics
    static_configs:
      - targets: ["{metrics_host}:{metrics_port}"]
""")
    port = free_port()
    prom = subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        def answer(query: str) -> list:
            assert prom.poll() is None, prom.stderr.read() if prom.stderr else ""
            try:
                return promql(port, query)
            except OSError:
                return []  # not listening yet

        def scraped(result: list) -> bool:  # both targets, with all 5 calls x 4 ranks counted
            return ({r["metric"]["job"] for r in result} == {"monarch-admin", "monarch-metrics"}
                    and all(float(r["value"][1]) >= 20 for r in result))

        handled = until(lambda: answer(
            'monarch_messages_handled_total{mesh="promtest",method="ping"}'), scraped)
        assert scraped(handled), handled
        up = until(lambda: answer('up{job="monarch-admin"}'), bool)
        assert up and up[0]["value"][1] == "1"
        latency = until(lambda: answer(
            'sum(monarch_handler_latency_seconds_count{mesh="promtest"})'),
            lambda r: r and float(r[0]["value"][1]) >= 20)
        assert latency and float(latency[0]["value"][1]) >= 20, latency
    finally:
        prom.send_signal(signal.SIGTERM)
        try:
            prom.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(prom.pid, signal.SIGKILL)
            prom.wait(10)
        exporters.close()
