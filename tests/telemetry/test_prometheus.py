from __future__ import annotations

import urllib.request

from monarch.telemetry import MetricPoint, Store, serve_metrics
from prometheus_client.parser import text_string_to_metric_families


def test_metrics_endpoint_serves_the_store() -> None:
    store = Store()
    store.add_many([
        MetricPoint("messages_handled", "counter", {"mesh": "trainer", "method": "step"}, 3,
                    1, "p0"),
        MetricPoint("messages_handled", "counter", {"mesh": "trainer", "method": "step"}, 4,
                    1, "p1"),
        MetricPoint("queue_depth", "gauge", {"actor": "trainer[0]"}, 2, 1, "p0"),
        MetricPoint("handler_latency_seconds", "histogram", {"mesh": "trainer"}, 0.3, 1, "p0",
                    3, (0.1, 1.0), (1, 2, 0)),
        MetricPoint("user.tokens", "counter", {}, 7, 1, "p0"),
    ])
    server = serve_metrics(store)
    try:
        assert server.address[0] == "127.0.0.1"
        with urllib.request.urlopen(server.url, timeout=10) as response:
            text = response.read().decode()
    finally:
        server.close()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    handled = families["monarch_messages_handled"]
    assert handled.type == "counter"
    (sample,) = [s for s in handled.samples if s.name.endswith("_total")]
    assert sample.value == 7 and sample.labels == {"mesh": "trainer", "method": "step"}
    depth = families["monarch_queue_depth"].samples[0]
    assert depth.value == 2 and depth.labels == {"actor": "trainer[0]", "proc": "p0"}
    buckets = {s.labels["le"]: s.value for s in families["monarch_handler_latency_seconds"].samples
               if s.name.endswith("_bucket")}
    assert buckets == {"0.1": 1, "1.0": 3, "+Inf": 3}
    assert "monarch_user_tokens" in families
