"""Click parameter types shared by the commands."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from runtime.api import DurationError, parse_duration


class Duration(click.ParamType[float, object]):
    """A Go-style duration (`60s`, `2m`, `1h30m`, `500ms`) or a bare number of seconds; the value is seconds."""

    name = "duration"

    def __init__(self, minimum: float | None = None, maximum: float | None = None) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def get_metavar(self, param: click.Parameter, ctx: click.Context) -> str:
        return "DURATION"

    def convert(self, value: object, param: click.Parameter | None, ctx: click.Context | None) -> float:
        # a float or int is seconds (a default, or a value converted before): idempotent
        text = value if isinstance(value, int | float) and not isinstance(value, bool) else str(value)
        try:
            return parse_duration(text, minimum=self.minimum, maximum=self.maximum)
        except DurationError as err:
            self.fail(str(err), param, ctx)


def timeout_option(what: str) -> Callable[[Any], Any]:
    """`--timeout DURATION` (default 2m, at least 1s) for how long a command waits for `what`."""
    return click.option(
        "--timeout",
        type=Duration(minimum=1),
        default="2m",
        show_default=True,
        help=f"how long to wait for {what}, e.g. 60s, 5m",
    )


REPO = Path(__file__).resolve().parents[3]
DEFAULT_POLICY_PACK = REPO / "policies"


def work_dir_option() -> Callable[[Any], Any]:
    """`--work-dir`: the Pulumi project a stack command runs."""
    return click.option(
        "--work-dir",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=Path("."),
        show_default=True,
        help="the Pulumi project (Pulumi.yaml, __main__.py)",
    )


def policy_pack_option(help: str) -> Callable[[Any], Any]:
    """`--policy-pack`: the pack a preview runs with (default: the project's policies/)."""
    return click.option(
        "--policy-pack",
        type=click.Path(exists=True, file_okay=False, path_type=Path),
        default=DEFAULT_POLICY_PACK,
        show_default=True,
        help=help,
    )
