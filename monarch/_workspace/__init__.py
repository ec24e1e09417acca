"""Workspaces: local code synced to the hosts (`HostMesh.sync_workspace`).

`_tree` hashes a directory tree; `_sync` (controller side) diffs it against each host's
manifest and sends what changed on the data plane; `_receiver` (an actor in a proc per host)
pulls the bytes and writes them; `_proc` puts the trees on procs' `sys.path` and reloads
changed modules.
"""
