"""What travels when an RDMABuffer is pickled: where its owner's data server is, and which
buffer. Plain frozen data; the memory itself never travels this way."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True, slots=True)
class ServerAddress:
    """An owner process's data server.

    Attributes:
        owner: the owner process's name in the job (`controller` or a proc id).
        pid: its pid (as seen on its host).
        hostname: its host, for messages.
        boot_id: its host's kernel boot id: equal boot ids mean the same machine.
        netns: its network namespace (inode): with the boot id, who can reach `unix_name`.
        unix_name: the server's abstract unix socket (same-host paths).
        tcp_host: the address its TCP listener is bound to.
        tcp_port: that listener's port.
        token: random per server start, so a restarted owner's ids never match old handles.
    """

    owner: str
    pid: int
    hostname: str
    boot_id: str
    netns: int
    unix_name: str
    tcp_host: str
    tcp_port: int
    token: bytes


@dataclasses.dataclass(frozen=True, slots=True)
class BufferHandle:
    """One registered buffer.

    Attributes:
        server: its owner's data server.
        buffer_id: its id in that server's registry.
        size: its length in bytes.
        readonly: True when the owner's memory must not be written.
        device: "cpu" or the CUDA device of the owner's tensor.
        owner_actor: the actor that created it (or the process name outside actors).
    """

    server: ServerAddress
    buffer_id: int
    size: int
    readonly: bool
    device: str
    owner_actor: str

    def describe(self) -> str:
        """How errors name it: `RDMABuffer #3 (1048576 bytes) of trainer[0] on host (pid 7)`."""
        server = self.server
        return (f"RDMABuffer #{self.buffer_id} ({self.size} bytes) of {self.owner_actor} "
                f"(process {server.owner}, pid {server.pid} on {server.hostname})")
