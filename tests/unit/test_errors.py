"""Error texts built in one place: the failure report of an actor (the actor's own slot, the
controller's supervisor, a caller's mesh and port), its reason nested below it; the traceback
a caller is shown."""

from __future__ import annotations

from monarch._runtime._errors import actor_failure_report, remote_traceback


def test_the_report_names_the_actor_and_nests_its_reason():
    label = "<root>.<__main__.A a{'gpus': 1/2}>"
    assert actor_failure_report(label, "the process exited with code 1") == (
        "The actor <root>.<__main__.A a{'gpus': 1/2}> and all its descendants have failed:\n"
        "  the process exited with code 1")


def test_every_line_of_a_long_reason_is_indented_under_the_report():
    reason = "ValueError: bad\nTraceback (most recent call last):\n  File \"x.py\", line 1"
    assert actor_failure_report("<a>", reason).splitlines() == [
        "The actor <a> and all its descendants have failed:",
        "  ValueError: bad",
        "  Traceback (most recent call last):",
        "    File \"x.py\", line 1"]


def test_the_remote_traceback_is_the_frames_and_the_exception_without_the_header():
    try:
        {}["missing"]
    except KeyError as exc:
        text = remote_traceback(exc)
    assert not text.startswith("Traceback") and not text.endswith("\n")
    assert text.startswith("  File ") and "test_errors.py" in text
    assert text.splitlines()[-1] == "KeyError: 'missing'"
