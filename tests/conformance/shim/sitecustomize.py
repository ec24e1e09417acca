"""Runs at interpreter start in every process of a conformance run (this folder is on
PYTHONPATH): maps Monarch's private module names onto pymonarch (`_monarch_private`)."""

import _monarch_private

_monarch_private.install()
