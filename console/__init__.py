"""The `monarch top` console."""
