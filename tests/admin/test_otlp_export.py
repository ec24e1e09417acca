"""An OTLP/HTTP receiver (opentelemetry-proto, in this test) gets the job's spans, logs and
metrics."""

from __future__ import annotations

import pytest
from otlp_receiver import OtlpReceiver, attrs
from waiting import wait_until

from monarch._controller._exporters import start_exporters

pytestmark = pytest.mark.timeout(120)


def handled_counts(receiver: OtlpReceiver, mesh: str) -> list[int]:
    """messages_handled of ``mesh`` as each metrics export carried it, oldest first."""
    metrics = receiver.metrics()
    return [point.as_int for metric in metrics if metric.name == "monarch_messages_handled"
            for point in metric.sum.data_points if attrs(point.attributes)["mesh"] == mesh]


def test_spans_joined_across_processes_and_logs_with_ranks(job, procs, echo_class,
                                                           monkeypatch):
    receiver = OtlpReceiver()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", receiver.url)
    monkeypatch.setenv("OTEL_SERVICE_NAME", "monarch-otlp-test")
    exporters = start_exporters(job)  # the job's own wiring, with the variables set
    try:
        assert exporters.otlp is not None
        mesh = procs.spawn("otlpmesh", echo_class)
        mesh.ping.call(7).get(timeout=30)

        def joined():
            spans = receiver.spans()
            calls = {s.span_id: (r, s) for r, s in spans if s.name == "call otlpmesh.ping"}
            return [(calls[s.parent_span_id], (r, s)) for r, s in spans
                    if s.name == "otlpmesh.ping" and s.parent_span_id in calls]

        pairs = wait_until(lambda: len(joined()) == 4 and joined(), "4 joined spans", 60)
        for (call_resource, call), (actor_resource, span) in pairs:
            assert span.trace_id == call.trace_id
            assert call_resource["monarch.proc"] == "controller"
            assert actor_resource["monarch.proc"] != "controller"
            assert actor_resource["process.pid"] != call_resource["process.pid"]
            assert actor_resource["service.name"] == "monarch-otlp-test"
            assert call_resource["monarch.job.id"] == job.job_id
            assert attrs(span.attributes)["mesh"] == "otlpmesh"
        assert sorted(attrs(s.attributes)["rank"] for _, (_, s) in pairs) == [0, 1, 2, 3]

        def echoed():
            logs = receiver.logs()
            return {attrs(r.attributes).get("rank"): (res, r) for res, r in logs
                    if r.body.string_value.startswith("echo 7 from ")}

        lines = wait_until(lambda: len(echoed()) == 4 and echoed(), "4 echoed lines", 60)
        for rank, (resource, record) in lines.items():
            assert record.body.string_value == f"echo 7 from {rank}"
            assert attrs(record.attributes)["mesh"] == "otlpmesh"
            assert resource["process.pid"] > 0 and resource["monarch.proc"] != "controller"
        exporters.close()  # sends the metric series a last time
        assert handled_counts(receiver, "otlpmesh")[-1] == 4
    finally:
        exporters.close()
        receiver.close()


SHORT_SCRIPT = '''
import logging
from monarch.actor import Actor, context, endpoint, this_host


class Echo(Actor):
    @endpoint
    def ping(self, x):
        rank = context().actor_instance.rank.rank
        print(f"echo {x} from {rank}", flush=True)
        logging.getLogger("echo").warning("warned %s from %s", x, rank)
        return x


procs = this_host().spawn_procs(per_host={"gpus": 2})
mesh = procs.spawn("short", Echo)
for i in range(5):
    mesh.ping.call(i).get()
procs.stop()
'''


def test_a_short_script_loses_nothing_at_exit(tmp_path):
    """Five calls, `procs.stop()` (not waited on), exit at once: every actor span and log line,
    and the final metrics, reach the collector before the controller exits."""
    import os
    import subprocess
    import sys

    receiver = OtlpReceiver()
    script = tmp_path / "short.py"
    script.write_text(SHORT_SCRIPT)
    env = dict(os.environ, OTEL_EXPORTER_OTLP_ENDPOINT=receiver.url,
               MONARCH_RUN_DIR=str(tmp_path / "run"))
    try:
        done = subprocess.run([sys.executable, str(script)], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=90)
        assert done.returncode == 0, done.stderr
        # the script has exited: what arrived is all there will be
        spans, logs = receiver.spans(), receiver.logs()
    finally:
        receiver.close()
    calls = {s.span_id for _, s in spans if s.name == "call short.ping"}
    handled = [s for _, s in spans if s.name == "short.ping"]
    assert len(calls) == 5 and len(handled) == 10
    assert all(s.parent_span_id in calls for s in handled)
    assert handled_counts(receiver, "short")[-1:] == [10]  # sent at exit (60 s between exports)
    texts = sorted(r.body.string_value for _, r in logs)
    assert texts == sorted([f"echo {x} from {r}" for x in range(5) for r in range(2)]
                           + [f"warned {x} from {r}" for x in range(5) for r in range(2)])
