"""Settings read from the environment: on/off switches (`MONARCH_LANES`,
`MONARCH_TELEMETRY`, `MONARCH_HISTORY`, `MONARCH_ADMIN`) and numbers (`MONARCH_TELEMETRY_MB`,
`MONARCH_HISTORY_MB`, `MONARCH_STALL_S`, ...): one reading of each kind for all of them, and a
value that does not read is a ValueError naming the setting, never a silent default. `on_off`
is the reading of a switch's text wherever it comes from (the admin API's flags too).

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
    return on_off(name, os.environ.get(name, ""), default)


def on_off(name: str, text: str, default: bool) -> bool:
    """`text` read as the value of switch `name` (an environment variable, a request's
    parameter): empty -> `default`; the spellings of `switch` otherwise.

    Raises:
        ValueError: any other value.
    """
    value = text.strip().lower()
    if not value:
        return default
    if value in ON:
        return True
    if value in OFF:
        return False
    raise ValueError(f"{name}={text!r}: expected one of {'/'.join(ON)} (on) or "
                     f"{'/'.join(OFF)} (off)")


def number(name: str, default: float, *, minimum: float = 0.0, above: bool = False,
           integer: bool = False) -> float:
    """The number in setting `name`: unset or empty -> `default`.

    Args:
        minimum: the smallest value accepted (or the bound it must be above, if `above`).
        integer: only whole numbers.

    Raises:
        ValueError: not a number, not whole when `integer`, or out of range.
    """
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text) if integer else float(text)
    except ValueError:
        kind = "a whole number" if integer else "a number"
        raise ValueError(f"{name}={text!r}: expected {kind}") from None
    if value != value or value < minimum or (above and value == minimum):  # NaN, range
        bound = f"above {minimum:g}" if above else f"at least {minimum:g}"
        raise ValueError(f"{name}={text!r}: expected a number {bound}")
    return value
