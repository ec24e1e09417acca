"""Private: see docs/DESIGN.md."""
