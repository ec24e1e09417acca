"""`python -m monarch.cli ...` runs the `monarch` command."""

from monarch.cli import main

main()
