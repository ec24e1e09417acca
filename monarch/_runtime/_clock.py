"""This process's hybrid logical clock, stamped on every envelope.

It is `monarch.telemetry`'s clock, so log lines and messages share one order: a stamp is
greater than every stamp given out or received so far in the process, and a line caused by a
message never sorts before the line that sent it.
"""

from __future__ import annotations

from ..telemetry._hlc import process_clock

# the clock's bound methods: one Python call per stamp on the message path, not two
now = process_clock().now
observe = process_clock().observe

__all__ = ["now", "observe"]
