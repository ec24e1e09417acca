"""The current screen of a running Textual app as plain text: the console's own
(`monarch.console._screen_text`, what `ctrl+s` saves)."""

from __future__ import annotations

from monarch.console._screen_text import screen_text

__all__ = ["screen_text"]
