"""The log lines of an ended job, read from its history: one filter (mesh, rank, text, the last
`limit` or those after an HLC) for `monarch logs --job` and the console of an ended job."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from monarch._history._client import HistoryClient
from monarch._history._runs import History
from monarch.telemetry import _tables
from monarch.telemetry._logchunk import LogChunk
from monarch.telemetry._records import LogRecord

LINES = [("trainers", 0, "step 1"), ("trainers", 1, "it's rank 1"), ("gen", 0, "it's gen"),
         ("trainers", 1, "step 2"), ("trainers", 1, "it's rank 1 again")]


@pytest.fixture
def client(tmp_path: Path) -> HistoryClient:
    (tmp_path / "logs").mkdir()
    (tmp_path / "job.json").write_text(json.dumps({"job_id": "j", "ended": 2.0,
                                                   "exit_code": 0}))
    records = [LogRecord(hlc, hlc * 1000, "stdout", 20, text, {"mesh": mesh, "rank": rank})
               for hlc, (mesh, rank, text) in enumerate(LINES, start=1)]
    pq.write_table(_tables.logs([LogChunk.of_records(records)]),
                   tmp_path / "logs" / "00000001.parquet")
    return HistoryClient(History(tmp_path))


def texts(lines: list[dict]) -> list[str]:
    return [line["text"] for line in lines]


def test_lines_are_filtered_by_mesh_rank_and_text_quotes_included(client):
    assert texts(client.logs(mesh="trainers", rank=1, text="it's")) == [
        "it's rank 1", "it's rank 1 again"]
    assert texts(client.logs(text="' OR 1 = 1 --")) == []  # a quote is text, not SQL
    assert texts(client.logs(mesh="gen")) == ["it's gen"]


def test_the_last_lines_come_in_order_or_those_after_an_hlc(client):
    assert texts(client.logs(limit=2)) == ["step 2", "it's rank 1 again"]
    assert texts(client.logs(since_hlc=3, limit=1)) == ["step 2"]
    line = client.logs(limit=1)[0]
    assert (line["mesh"], line["rank"], line["hlc"], line["tags"]["mesh"]) == (
        "trainers", 1, 5, "trainers")
