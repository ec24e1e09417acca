"""Jobs that outlive scripts: the machinery behind `monarch.job` (see that module)."""
