"""Stacks across ranks: what each actor's thread runs now, and ranks grouped by identical stack.

The first question in a stuck job is *which ranks are somewhere else, and where*. Each proc's
system agent answers `stacks` for one actor from its I/O thread (`actor_stack`: the frames of
the actor's thread, or of its oldest running task for an async actor, without the runtime's
own frames), so a rank stuck in a handler still answers; the controller asks every selected
rank at once and `group_stacks` folds identical stacks together, the smallest groups (the
odd ones out) first: "ranks 0-6,8-15: all_reduce ← train_step; rank 7: __next__ ← ...".
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
from typing import Any

Frame = tuple[str, int, str]
"""(file, line, function), outermost first."""

def _our_folders() -> tuple[str, ...]:
    """The folders of our own code: the monarch package and its telemetry (a folder of its own
    in a source checkout)."""
    from .. import telemetry

    return tuple({os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                  os.path.dirname(os.path.abspath(telemetry.__file__))})


_OURS = _our_folders()
_SKIPPED = (os.path.dirname(threading.__file__),)  # the standard library's threading/asyncio


def actor_stack(slot: Any) -> dict[str, Any]:
    """What `slot`'s actor runs now: its state, the handlers running, and the user frames of
    its thread (empty: idle, waiting for a message). Any thread may call it."""
    running = [entry[0] for entry in sorted(list(slot.running.values()), key=lambda r: r[1])]
    frames: list[Frame] = []
    loop = getattr(slot, "_loop", None)
    if loop is not None:  # an async actor: its handlers are tasks on the actor's loop
        frames = _task_frames(loop)
    if not frames:
        thread = slot.thread
        frame = sys._current_frames().get(thread.ident) if thread is not None else None
        frames = user_frames(_walk(frame))
    return {"state": slot.state, "running": running, "frames": frames}


def _walk(frame: Any) -> list[Frame]:
    out = []
    while frame is not None:
        out.append((frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name))
        frame = frame.f_back
    out.reverse()
    return out


def _task_frames(loop: asyncio.AbstractEventLoop) -> list[Frame]:
    """The frames of the oldest task of `loop` that runs user code."""
    try:
        tasks = list(asyncio.all_tasks(loop))
    except RuntimeError:  # the set changed while we copied it: no stack this time
        return []
    for task in tasks:
        try:
            stack = task.get_stack()
        except Exception:  # noqa: BLE001 - the task ended while we looked
            continue
        frames = user_frames([(f.f_code.co_filename, f.f_lineno, f.f_code.co_name)
                              for f in stack])
        if frames:
            return frames
    return []


def user_frames(frames: list[Frame]) -> list[Frame]:
    """`frames` without the runtime's (monarch's own files) and the standard library's
    threading and asyncio machinery: what the user's code runs."""
    return [f for f in frames if not f[0].startswith(_OURS) and not f[0].startswith(_SKIPPED)]


def summary(frames: list[Frame], depth: int = 2) -> str:
    """`inner ← caller` of the innermost frames; "idle" when there are none."""
    if not frames:
        return "idle (waiting for a message)"
    return " ← ".join(name for _, _, name in reversed(frames[-depth:]))


def group_stacks(answers: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """Ranks grouped by identical stack (file, line and function of every frame): each group
    with its ranks, summary, running handlers and frames; the smallest groups first (the odd
    ones out), ties by first rank. A rank whose answer has an `error` is grouped by it."""
    groups: dict[Any, dict[str, Any]] = {}
    for rank in sorted(answers):
        answer = answers[rank]
        error = answer.get("error")
        frames = [tuple(f) for f in answer.get("frames", [])]
        key = ("error", error) if error else ("frames", tuple(frames))
        group = groups.get(key)
        if group is None:
            group = groups[key] = {
                "ranks": [], "summary": error or summary(frames), "error": error,
                "frames": [list(f) for f in frames], "running": set()}
        group["ranks"].append(rank)
        group["running"].update(answer.get("running", []))
    out = sorted(groups.values(), key=lambda g: (len(g["ranks"]), g["ranks"][0]))
    for group in out:
        group["running"] = sorted(group["running"])
    return out
