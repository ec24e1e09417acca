"""Clients of a running job's admin API: discovery of live jobs, `AdminClient` (the public
`monarch.admin` re-exports them). Below the history and jobs rooms, which use it."""
