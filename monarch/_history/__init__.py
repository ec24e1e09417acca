"""Job histories: the Parquet folders of jobs that ran (`_runs`) and the read-only client of an
ended job (`_client`)."""
