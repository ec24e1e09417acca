"""A proc's main: what a forked or bootstrapped proc runs (`monarch._proc_boot` is its entry)."""
