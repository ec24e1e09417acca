"""A pure-Python Monarch: single-controller distributed actors.

Users import from `monarch.actor`, `monarch.rdma` and `monarch.config`; everything else is private.
Importing this package starts nothing.
"""

__version__ = "0.1.0"
