"""The per-process runtime: the I/O loop (`_process_runtime`), casting (leader, gather,
ordering, forwarding), ports and futures, the clock, the current context and identity, errors,
instrumentation, calls to the controller and settings. Imports geometry and the wire."""
