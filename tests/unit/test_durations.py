"""runtime.api.durations: Go-style durations (as kubectl and liqoctl take them) for flags and config."""

from __future__ import annotations

import pytest

from runtime.api import DurationError, format_duration, parse_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60),
        ("2m", 120),
        ("1h30m", 5400),
        ("500ms", 0.5),
        ("1.5h", 5400),
        ("1m30.5s", 90.5),
        ("250us", 0.00025),
        ("250µs", 0.00025),
        ("10ns", 1e-8),
        (".5s", 0.5),
        ("-2s", -2),
        ("+2s", 2),
        ("0", 0),
        ("120", 120),  # a bare number is seconds, as the flags and config took it before
        ("1.5", 1.5),
        (90, 90),
        (2.5, 2.5),
    ],
)
def test_go_durations_and_bare_numbers(text: str | int | float, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("60x", "'60x' is not a duration: unknown unit 'x', use h, m, s, ms, us or ns (e.g. 60s, 2m, 1h30m, 500ms, "
         "or a bare number of seconds)"),
        ("1h30", "'1h30' is not a duration: 30 has no unit (e.g. 60s, 2m, 1h30m, 500ms, or a bare number of seconds)"),
        ("", "'' is not a duration (e.g. 60s, 2m, 1h30m, 500ms, or a bare number of seconds)"),
        ("s", "'s' is not a duration (e.g. 60s"),
        ("-", "'-' is not a duration (e.g. 60s"),
        ("1 m", "'1 m' is not a duration: unknown unit ' m'"),
        ("inf", "'inf' is not a duration (e.g. 60s"),
        ("1e3s", "'1e3s' is not a duration: unknown unit 'e'"),
        (True, "'true' is not a duration"),
        (float("nan"), "'nan' is not a duration"),
    ],
)  # fmt: skip
def test_a_bad_duration_says_why_and_gives_examples(text: str | float, message: str) -> None:
    with pytest.raises(DurationError) as caught:
        parse_duration(text)
    assert str(caught.value).startswith(message)
    assert isinstance(caught.value, ValueError)


def test_bounds_are_inclusive_and_named_as_durations() -> None:
    assert parse_duration("1s", minimum=1, maximum=3600) == 1
    assert parse_duration("1h", minimum=1, maximum=3600) == 3600
    with pytest.raises(DurationError) as caught:
        parse_duration("500ms", minimum=1)
    assert str(caught.value) == "'500ms' is shorter than the minimum, 1s"
    with pytest.raises(DurationError) as caught:
        parse_duration("61m", minimum=1, maximum=3600)
    assert str(caught.value) == "'61m' is longer than the maximum, 1h (allowed: 1s to 1h)"
    assert caught.value.reason == "is longer than the maximum, 1h (allowed: 1s to 1h)"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.5, "500ms"), (0.00025, "250us"), (1, "1s"), (90, "1m30s"), (120, "2m"), (5400, "1h30m"),
     (3600, "1h"), (3661.5, "1h1m1.5s"), (-2, "-2s")],
)  # fmt: skip
def test_format_is_the_short_go_form_and_reads_back(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == pytest.approx(seconds)
