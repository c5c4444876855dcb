"""Durations as every Kubernetes CLI writes them (Go's time.ParseDuration): `60s`, `2m`, `1h30m`, `500ms`.

One parser for the CLI flags and the stack config, so both accept and reject the same texts with
the same words. A bare number is seconds: older configs and scripts wrote `healthCheckIntervalSeconds: 10`
and `--timeout 120`.
"""

from __future__ import annotations

import re
from decimal import Decimal

EXAMPLES = "e.g. 60s, 2m, 1h30m, 500ms, or a bare number of seconds"

# Go's units; both spellings of micro that Go accepts
_UNITS: dict[str, Decimal] = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "μs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_BARE = re.compile(rf"[-+]?{_NUMBER}")
_SIGN = re.compile(r"[-+]?")
_PART = re.compile(rf"({_NUMBER})([^\d.]*)")


class DurationError(ValueError):
    """Not a duration, or out of range. `reason` is the message without the offending text."""

    def __init__(self, text: str, reason: str) -> None:
        super().__init__(f"{text!r} {reason}")
        self.text = text
        self.reason = reason


def parse_duration(value: str | int | float, *, minimum: float | None = None, maximum: float | None = None) -> float:
    """Seconds in `value`: a Go duration (`1h30m`, `1.5h`, `500ms`, `-2s`) or a bare number of seconds.

    `minimum`/`maximum` (seconds, inclusive) bound the result; a value outside says the range.
    """
    if isinstance(value, bool):  # a YAML `true` is not 1 second
        raise DurationError(str(value).lower(), f"is not a duration ({EXAMPLES})")
    if isinstance(value, int | float):
        seconds = Decimal(str(value))
        text = str(value)
        if not seconds.is_finite():
            raise DurationError(text, f"is not a duration ({EXAMPLES})")
    else:
        text = value
        seconds = _parse_text(text)
    if minimum is not None and seconds < Decimal(str(minimum)):
        raise DurationError(text, f"is shorter than the minimum, {format_duration(minimum)}{_range(minimum, maximum)}")
    if maximum is not None and seconds > Decimal(str(maximum)):
        raise DurationError(text, f"is longer than the maximum, {format_duration(maximum)}{_range(minimum, maximum)}")
    return float(seconds)


def _range(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f" (allowed: {format_duration(minimum)} to {format_duration(maximum)})"
    return ""


def _parse_text(text: str) -> Decimal:
    if _BARE.fullmatch(text):
        return Decimal(text)
    sign = _SIGN.match(text)
    position = sign.end() if sign else 0
    if position == len(text):
        raise DurationError(text, f"is not a duration ({EXAMPLES})")
    total = Decimal(0)
    while position < len(text):
        part = _PART.match(text, position)
        if not part:
            raise DurationError(text, f"is not a duration ({EXAMPLES})")
        number, unit = part.groups()
        if not unit:
            raise DurationError(text, f"is not a duration: {number} has no unit ({EXAMPLES})")
        if unit not in _UNITS:
            raise DurationError(
                text, f"is not a duration: unknown unit {unit!r}, use h, m, s, ms, us or ns ({EXAMPLES})"
            )
        total += Decimal(number) * _UNITS[unit]
        position = part.end()
    return -total if text.startswith("-") else total


def format_duration(seconds: float) -> str:
    """The shortest Go-style text for `seconds`, which parse_duration reads back: 90 -> `1m30s`."""
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds == 0:
        return "0s"
    if seconds < 0.001:
        return f"{_plain(Decimal(str(seconds)) * 1_000_000)}us"
    if seconds < 1:
        return f"{_plain(Decimal(str(seconds)) * 1000)}ms"
    rest = Decimal(str(seconds))
    hours, rest = divmod(rest, 3600)
    minutes, rest = divmod(rest, 60)
    text = (f"{_plain(hours)}h" if hours else "") + (f"{_plain(minutes)}m" if minutes else "")
    return text + (f"{_plain(rest)}s" if rest else "")


def _plain(number: Decimal) -> str:
    """Decimal without exponent or trailing zeros: 1.50 -> 1.5, 1E+1 -> 10."""
    text = f"{number.normalize():f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
