"""conftest of torchmonarch's extracted test folder in a conformance run (replaces Monarch's own,
which loads plugins of its build and CI). Monarch's tests need nothing from it: the private
names they import are mapped by `shim/sitecustomize.py`, in every process of the run."""
