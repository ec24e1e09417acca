"""The per-process runtime: the I/O loop (`_process_runtime`), casting (leader, gather,
ordering, forwarding), ports and futures, the clock, the current context and identity, errors,
instrumentation, calls to the controller, settings, run directories and whether a pid is alive
(`_pids`). Imports geometry and the wire."""
