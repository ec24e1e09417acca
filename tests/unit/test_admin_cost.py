"""The admin API's own cost counters (`_controller._admin_cost`)."""

from __future__ import annotations

import threading

from monarch._controller import _admin_cost


def test_costs_sum_by_route_and_stay_bounded():
    costs = _admin_cost.Costs()
    costs.add("GET /v1/job", 0.002, 0.001)
    costs.add("GET /v1/job", 0.003, 0.0)
    for i in range(300):
        costs.add(f"GET /v1/x{i}", 0.001, 0.0)
    found = costs.snapshot()
    assert found["routes"]["GET /v1/job"] == {"requests": 2, "cpu_s": 0.005, "io_s": 0.001}
    assert len(found["routes"]) <= 257 and found["routes"]["other"]["requests"] >= 44
    assert abs(found["cpu_s"] - (0.006 + 0.3)) < 1e-6


def test_io_time_belongs_to_the_thread_that_serves_the_request():
    _admin_cost.take_io()
    _admin_cost.io_spent(0.25)
    other = []
    thread = threading.Thread(target=lambda: other.append(_admin_cost.take_io()))
    thread.start()
    thread.join()
    assert other == [0.0]
    assert _admin_cost.take_io() == 0.25 and _admin_cost.take_io() == 0.0
