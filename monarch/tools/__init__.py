"""Tools around a job: `monarch.tools.network` resolves host addresses, as in Monarch."""
