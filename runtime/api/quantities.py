"""Kubernetes quantities as numbers.

lightkube's parser knows the suffixes down to milli; Kubernetes also accepts nano and micro
("250000000n": metrics.k8s.io writes CPU usage so, and a pod may request it so), on which
lightkube raises. One parser for the runtime and the stack, so such a quantity never crashes a
controller.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from lightkube.utils.quantity import parse_quantity as _milli_and_up

_SMALL_SUFFIXES = {"n": Decimal("1e-9"), "u": Decimal("1e-6")}


def parse_quantity(value: object) -> Decimal | None:
    """The quantity's value (None for None); ValueError on a malformed one."""
    if value is None:
        return None
    text = str(value).strip()
    scale = _SMALL_SUFFIXES.get(text[-1:])
    if scale is not None:
        try:
            return Decimal(text[:-1]) * scale
        except InvalidOperation:
            raise ValueError(f"Invalid quantity: {text!r}") from None
    return _milli_and_up(text)
