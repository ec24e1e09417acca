"""The seam through which the runtime starts a job without importing the controller.

The runtime (`_context.root()`) calls the starter registered here; only the public surface
(`monarch.actor`, `monarch.rdma`, `monarch.job`) imports this module, so the layers run one way:
public surface -> controller -> runtime. Importing it registers a function and nothing more.
"""

from __future__ import annotations

from .._runtime import _context


def _start_job() -> None:
    from .._host._agent import start_zygote

    zygote = start_zygote(relay_output=True)  # its imports run beside the controller's
    from ._job import ensure_job

    ensure_job(zygote)


_context.set_job_starter(_start_job)
