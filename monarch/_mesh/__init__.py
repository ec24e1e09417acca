"""Meshes: actor, proc and host meshes, bootstrap commands, host workers, SPMD helpers. The user
API's nouns, built on actors and the runtime."""
