"""The conformance suite's folder on sys.path (monarch_suite is imported by name)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
