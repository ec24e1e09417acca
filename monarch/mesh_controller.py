"""Where Monarch's scripts import `RemoteException` from (`monarch.mesh_controller`)."""

from ._tensor._fetch import RemoteException

__all__ = ["RemoteException"]
