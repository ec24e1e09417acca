"""A real Prometheus (Debian's package, started here) scrapes the job and answers PromQL."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from monarch._controller._exporters import start_exporters

pytestmark = pytest.mark.timeout(300)


def prometheus_binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        pytest.skip("prometheus is not installed and apt-get (as root) is not available")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = [apt, "install", "-y", "-q", "--no-install-recommends", "prometheus"]
    if subprocess.run(install, capture_output=True, env=env, timeout=240).returncode != 0:
        subprocess.run([apt, "update", "-q"], capture_output=True, env=env, timeout=240)
        out = subprocess.run(install, capture_output=True, text=True, env=env, timeout=240)
        if out.returncode != 0:
            pytest.skip(f"apt-get could not install prometheus: {out.stderr[-300:]}")
    return shutil.which("prometheus") or "/usr/bin/prometheus"


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
        query = 'monarch_messages_handled_total{mesh="promtest",method="ping"}'
        deadline = time.monotonic() + 120
        result: list = []
        while time.monotonic() < deadline:
            try:
                result = promql(port, query)
            except OSError:
                result = []  # not listening yet
            if {r["metric"]["job"] for r in result} == {"monarch-admin", "monarch-metrics"}:
                break
            assert prom.poll() is None, prom.stderr.read() if prom.stderr else ""
            time.sleep(0.5)
        assert {r["metric"]["job"] for r in result} == {"monarch-admin", "monarch-metrics"}
        assert all(float(r["value"][1]) >= 20 for r in result), result  # 5 calls x 4 ranks
        up = promql(port, 'up{job="monarch-admin"}')
        assert up and up[0]["value"][1] == "1"
        latency = promql(port, 'sum(monarch_handler_latency_seconds_count{mesh="promtest"})')
        assert latency and float(latency[0]["value"][1]) >= 20
    finally:
        prom.send_signal(signal.SIGTERM)
        try:
            prom.wait(20)
        except subprocess.TimeoutExpired:
            os.kill(prom.pid, signal.SIGKILL)
            prom.wait(10)
        exporters.close()
