"""conftest of torchmonarch's extracted test folder in a conformance run (replaces Monarch's own,
which loads plugins of its build and CI). Monarch's tests need nothing from it: the private
names they import are mapped by `shim/sitecustomize.py`, in every process of the run. Monarch's
own autouse fixtures run as they are (`stop_all_proc_meshes` stops the proc meshes a test left
running, through the root's `_children`)."""


def pytest_collection_modifyitems(config, items):
    # A conformance run names the tests it requires (monarch_suite.ONLY_VARIABLE): the others
    # (failing on torchmonarch itself, or excluded with a reason) are deselected.
    import os

    path = os.environ.get("MONARCH_CONFORMANCE_ONLY")
    if not path:
        return
    with open(path) as listing:
        wanted = set(listing.read().split("\n"))
    keep = [item for item in items if item.nodeid in wanted]
    dropped = [item for item in items if item.nodeid not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep
