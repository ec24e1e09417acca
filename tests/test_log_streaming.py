"""Log forwarding to the client (`ProcMesh.logging_option`), end to end in a real script:
lines one by one or folded per window, levels, the warning when forwarding was off, and
nothing held back when the mesh stops."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.timeout(120)

SCRIPT = textwrap.dedent('''
    import asyncio, logging, sys, warnings
    from monarch.actor import Actor, endpoint, this_host
    from monarch.config import configure

    class Printer(Actor):
        @endpoint
        async def say(self, text):
            print(text, flush=True)

        @endpoint
        async def log(self, text, level):
            logging.getLogger().log(level, text)

    async def main(mode):
        configure(enable_log_forwarding=mode != "off")
        procs = this_host().spawn_procs(per_host={"gpus": 2})
        printer = procs.spawn("printer", Printer)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if mode == "lines":
                await procs.logging_option(stream_to_client=True, aggregate_window_sec=None)
            elif mode in ("window", "off"):
                await procs.logging_option(stream_to_client=True, aggregate_window_sec=60,
                                           level=logging.ERROR)
        print("WARNINGS", len(caught), *(str(w.message)[:60] for w in caught), flush=True)
        if mode == "raw":  # the client's stdout now goes elsewhere: the lines follow it
            saved, sys.stdout = sys.stdout, open("redirected.txt", "w")
            await printer.say.call("hello raw")
            await procs.stop()
            sys.stdout.close()
            sys.stdout = saved
            print("REDIRECTED", open("redirected.txt").read().count("hello raw"), flush=True)
            return
        for i in range(3):
            await printer.say.call("hello stream")
            await printer.log.call("an error line", logging.ERROR)
            await printer.log.call("a warning line", logging.WARNING)
            if mode == "window" and i < 2:  # the window's lines span seconds: still one fold
                await asyncio.sleep(1.1)
        await procs.stop()  # a 60 s window still holds the lines: stop prints them
        print("STOPPED", flush=True)

    asyncio.run(main(sys.argv[1]))
''')


def run(tmp_path, mode):
    script = tmp_path / "stream.py"
    script.write_text(SCRIPT)
    out = subprocess.run([sys.executable, str(script), mode], capture_output=True, text=True,
                         timeout=100, cwd=tmp_path, env=dict(os.environ, NO_COLOR="1"))
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout, out.stderr


def test_each_line_with_its_proc_and_rank(tmp_path):
    stdout, stderr = run(tmp_path, "lines")
    assert "WARNINGS 0" in stdout
    for rank in (0, 1):
        assert len(re.findall(rf"\[\S+ \S+-{rank}\] \[{rank}\] hello stream", stdout)) == 3
        assert len(re.findall(rf"\[\S+ \S+-{rank}\] \[{rank}\] an error line", stderr)) == 3
    assert "similar log lines" not in stdout + stderr


def test_a_window_folds_identical_lines_and_stop_prints_it(tmp_path):
    stdout, stderr = run(tmp_path, "window")
    # 3 calls x 2 procs, held by the 60 s window until the mesh stopped
    assert re.search(r"\[6 similar log lines\] \[0-1\] hello stream", stdout), stdout
    assert re.search(r"\[6 similar log lines\] \[0-1\] an error line", stderr), stderr
    assert "a warning line" not in stderr.split(">>> Aggregated Logs")[-1]  # below ERROR
    assert stdout.index("similar log lines") < stdout.index("STOPPED")
    assert ">>> Aggregated Logs (" in stdout and "<<< Aggregated Logs (" in stdout


def test_no_forwarding_means_no_stream_and_a_warning(tmp_path):
    stdout, stderr = run(tmp_path, "off")
    assert "WARNINGS 1 logging_option(stream_to_client=True) has no effect" in stdout
    assert "similar log lines" not in stdout + stderr
    assert not re.search(r"\] \[[01]\] hello stream", stdout)


def test_forwarded_lines_follow_the_clients_stdout(tmp_path):
    """With forwarding on, procs do not write to the terminal they inherited: the client
    prints their lines where its own stdout points now (here a file, after the job started)."""
    stdout, _ = run(tmp_path, "raw")
    assert "REDIRECTED 2" in stdout  # one line per proc, in the file
    assert "hello raw" not in stdout.replace("REDIRECTED", "")


def test_an_aggregation_window_that_fills_is_printed_at_once(tmp_path, monkeypatch, capsys):
    """A window holds at most MAX_WINDOW_LINES lines (a mesh writing fast must not keep
    seconds of lines in memory): the one that fills is printed then, folded."""
    import time as _time

    from monarch import telemetry
    from monarch._controller import _logstream

    monkeypatch.setattr(_logstream, "MAX_WINDOW_LINES", 10)
    streamer = _logstream.LogStreamer(telemetry.Store(), tmp_path)
    streamer.add_mesh("pm", forwarding=True, capture=False)
    streamer._meshes["pm"].mode = _logstream.Mode(stream=True, window=3600.0)
    now = _time.time_ns()
    records = [telemetry.LogRecord(now + i, now + i, "stdout", 20, "same line",
                                   {"proc": f"pm-{i % 2}", "rank": i % 2}) for i in range(25)]
    streamer._take(records)
    out = capsys.readouterr().out
    assert out.count("[10 similar log lines]") == 2  # two windows filled; 5 lines still held
    assert len(streamer._meshes["pm"].pending) == 5
