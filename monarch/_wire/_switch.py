"""On/off switches read from the environment (`MONARCH_LANES`, `MONARCH_TELEMETRY`,
`MONARCH_HISTORY`, `MONARCH_ADMIN`): one reading of their values for all of them.

In the wire layer because the lanes read theirs there, and the wire imports nothing above it.
"""

from __future__ import annotations

import os

ON = ("1", "true", "on", "yes")
OFF = ("0", "false", "off", "no")


def switch(name: str, default: bool = True) -> bool:
    """The switch `name`: unset or empty -> `default`; 1/true/on/yes -> on; 0/false/off/no ->
    off (any case, spaces around ignored).

    Raises:
        ValueError: any other value (a typo must not silently mean on).
    """
    value = os.environ.get(name, "").strip().lower()
    if not value:
        return default
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ValueError(f"{name}={os.environ[name]!r}: expected one of {'/'.join(ON)} (on) or "
                     f"{'/'.join(OFF)} (off)")
