"""`monarch logs --fold` folds and labels lines as the console does."""

from __future__ import annotations

import time

from monarch.cli._logs import _print
from monarch.console._logmodel import LogBuffer


def test_folded_lines_keep_their_time_and_the_consoles_label(capsys, monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    now = time.time()
    hlc = int(now * 1e9) << 16 >> 16  # any stamp of this second
    lines = [{"hlc": hlc + r, "time": now, "stream": "stdout", "level": 20,
              "text": "syncing gradients", "mesh": "trainers", "rank": r, "proc": f"p-{r}"}
             for r in range(4)]
    lines.append({"hlc": hlc + 9, "time": now, "stream": "stdout", "level": 20,
                  "text": "alone", "mesh": "gen", "rank": 1, "proc": "g-1"})
    _print(lines, as_json=False, fold=True)
    out = capsys.readouterr().out.splitlines()
    stamp = time.strftime("%H:%M:%S", time.localtime(now))
    assert out == [f"{stamp}.{int(now * 1000) % 1000:03d} trainers[0-3] [4 similar log lines] "
                   "syncing gradients",
                   f"{stamp}.{int(now * 1000) % 1000:03d} gen[1] alone"]
    buffer = LogBuffer()
    buffer.extend(lines)
    assert [line.source for line in buffer.lines()] == ["trainers[0-3]", "gen[1]"]
