"""The `/` filter of every view, k9s's way: a case-insensitive regular expression, `!` in
front inverts it (`!heartbeat`: everything but); text that is not a valid expression is
matched literally, so a stray `(` never empties a view."""

from __future__ import annotations

import dataclasses
import functools
import re
from collections.abc import Iterable


@dataclasses.dataclass(frozen=True, slots=True)
class TextFilter:
    """`TextFilter("loss|nan")`, `TextFilter("!debug")`; blank matches everything."""

    text: str = ""

    @property
    def inverted(self) -> bool:
        return self.text.startswith("!")

    @property
    def pattern(self) -> str:
        return self.text[1:] if self.inverted else self.text

    def matches(self, value: str) -> bool:
        return self.matches_any((value,))

    def matches_any(self, values: Iterable[str]) -> bool:
        """Whether the expression is found in any of `values` (a table row's cells, each on its
        own: `^gen` and `ors$` anchor to a cell); inverted, in none of them."""
        if not self.pattern:
            return True
        found = _compiled(self.pattern)
        return any(found.search(v) is not None for v in values) != self.inverted


@functools.lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    try:
        return re.compile(pattern, re.IGNORECASE)
    except re.error:
        return re.compile(re.escape(pattern), re.IGNORECASE)
