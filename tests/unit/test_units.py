from __future__ import annotations

import pytest

from rsa_scheduler.core.units import (
    MAX_DURATION,
    MAX_TIME,
    format_duration,
    format_size,
    parse_duration,
    parse_size,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1024", 1024),
        ("1K", 1024),
        ("512M", 512 << 20),
        ("64G", 64 << 30),
        ("64g", 64 << 30),
        ("3.5T", int(3.5 * (1 << 40))),
        ("3.5TB", int(3.5 * (1 << 40))),  # NERSC's complaint: 3.5TB misparsed elsewhere
        ("3.5TiB", int(3.5 * (1 << 40))),
        (" 2 G ", 2 << 30),
    ],
)
def test_parse_size(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "G", "-1G", "1.5", "12X", "1e3", "1,5G", "1\u212a"])
def test_parse_size_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid size"):
        parse_size(text)


def test_format_size_round_trips() -> None:
    for text in ("512M", "64G", "3.5T", "1K"):
        assert parse_size(format_size(parse_size(text))) == parse_size(text)
    assert format_size(100) == "100B"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (30, 30.0),
        (1.5, 1.5),
        ("30s", 30.0),
        ("250ms", 0.25),
        ("5m", 300.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("10", 600.0),
        ("10:30", 630.0),
        ("01:00:00", 3600.0),
        ("1-00", 86400.0),
        ("1-02:03", 86400 + 2 * 3600 + 180.0),
        ("1-02:03:04", 86400 + 2 * 3600 + 184.0),
    ],
)
def test_parse_duration(text: str | int | float, expected: float) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "5x", "-5", "a:b", True, -3, "10\u017f", "\u0661\u0660s"])
def test_parse_duration_rejects(text: str | int | float) -> None:
    with pytest.raises(ValueError, match="invalid duration"):
        parse_duration(text)


def test_format_duration() -> None:
    assert format_duration(0) == "00:00:00"
    assert format_duration(3725) == "01:02:05"
    assert format_duration(90061) == "1-01:01:01"


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (float("nan"), "not a number"),
        (float("inf"), "must be finite"),
        (-0.5, "must not be negative"),
        (10**400, "must be finite"),  # too large for a float
        ("9" * 400 + "s", "must be finite"),
        ("9" * 400 + "-00", "must be finite"),
        (True, "got a boolean"),
    ],
)
def test_parse_duration_is_finite_and_not_negative(value: object, reason: str) -> None:
    with pytest.raises(ValueError, match=rf"invalid duration.*{reason}"):
        parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "value",
    [366 * 86400, 1e300, float("inf"), "366d", "99999999999999999999999999d", "8761h",
     "366-00", "9" * 400 + "-00", "525601"],
)
def test_parse_duration_limit(value: str | float) -> None:
    with pytest.raises(ValueError, match=r"invalid duration .*must be (at most 365d|finite)"):
        parse_duration(value, limit=MAX_DURATION)


def test_parse_duration_limit_is_inclusive() -> None:
    assert parse_duration("365d", limit=MAX_DURATION) == MAX_DURATION
    assert parse_duration("3650d", limit=MAX_TIME) == MAX_TIME
    with pytest.raises(ValueError, match=r"must be at most 3650d \(10 years\)"):
        parse_duration("3651d", limit=MAX_TIME)
    assert parse_duration("99999999999999999999d") == 99999999999999999999 * 86400.0


def test_parse_duration_rejects_other_types() -> None:
    with pytest.raises(TypeError, match="expected a duration"):
        parse_duration([5])  # type: ignore[arg-type]


def test_format_duration_of_non_finite_values_is_slurms() -> None:
    assert format_duration(float("nan")) == "INVALID"
    assert format_duration(float("inf")) == "UNLIMITED"
