"""The exception tree users meet. Each docstring says when it is raised and what to do."""

from __future__ import annotations

import traceback
from typing import Any


class ActorError(Exception):
    """An endpoint raised an exception; raised by `.get()`/`await` on the call's future.

    `.exception` is the original exception (when it could be pickled; otherwise a RuntimeError
    carrying its text). `str()` reads `Actor call <mesh>.<method> failed.` followed by the remote
    traceback. The actor survives and takes further calls: catch it and carry on.
    """

    def __init__(self, exception: BaseException,
                 message: str = "A remote actor call has failed.") -> None:
        self.exception = exception
        self.message = message
        self.remote_traceback = ""
        super().__init__(message)

    def __str__(self) -> str:
        if not self.remote_traceback:
            return f"{self.message}\n{type(self.exception).__name__}: {self.exception}"
        return (f"{self.message}\n Traceback of where the remote call failed "
                f"(most recent call last):\n{self.remote_traceback}")

    def __reduce__(self) -> Any:
        return _rebuild_actor_error, (self.exception, self.message, self.remote_traceback)


def _rebuild_actor_error(exception: BaseException, message: str, remote_traceback: str) -> ActorError:
    err = ActorError(exception, message)
    err.remote_traceback = remote_traceback
    return err


class SupervisionError(RuntimeError):
    """A call went to an actor that has failed or was stopped, or it failed while in flight.

    The text reads `Endpoint call <mesh>.<method>() failed, The actor <...> and all its
    descendants have failed:` and the reason (process exit code or signal, the exception that
    killed the actor, or that it was stopped). The actor will not answer again: spawn a new
    mesh (a new ProcMesh on the same host works) or call a slice that excludes the failed ranks.
    """

    def __init__(self, message: str, *, endpoint: str | None = None,
                 failure: Any = None) -> None:
        super().__init__(message)
        self.endpoint = endpoint
        self.failure = failure

    def __reduce__(self) -> Any:
        return SupervisionError, (self.args[0],), {"endpoint": self.endpoint,
                                                   "failure": self.failure}


class UnpicklableError(RuntimeError):
    """An argument or a result could not be pickled or unpickled.

    Raised at the caller (through the call's future for results). The actor survives. Send
    plain data, tensors, arrays, or objects whose classes the receiving process can import.
    """


def actor_failure_report(label: str, reason: str) -> str:
    """The report of a failed or stopped actor, as SupervisionError and MeshFailure show it:
    `The actor <label> and all its descendants have failed:` and the reason below it."""
    return f"The actor {label} and all its descendants have failed:\n  {indent(reason)}"


def indent(text: str) -> str:
    """Indents the lines after the first by two spaces (a reason nested in a report)."""
    return text.replace("\n", "\n  ")


def remote_traceback(exc: BaseException) -> str:
    """The traceback of `exc` as a caller is shown it (`remote_traceback` of an ActorError):
    its frames and the exception, without the `Traceback (most recent call last):` line."""
    lines = traceback.format_exception(type(exc), exc, exc.__traceback__)
    if lines and lines[0].startswith("Traceback"):
        lines = lines[1:]
    return "".join(lines).rstrip("\n")
