"""Actors: the Actor class, endpoints, channels, the slots that run actors in a proc, the proc's
system agent, supervision and the debugger. Built on the runtime."""
