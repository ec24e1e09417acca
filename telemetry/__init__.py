"""Telemetry: records, clock, store and exporters. Imports nothing of monarch."""
