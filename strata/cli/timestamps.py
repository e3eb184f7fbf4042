"""Times and durations as Kafka's tools take them: epoch milliseconds or ISO 8601 date-times
(``2024-01-31T12:00:00.000``, optional ``Z`` or ``+02:00``; no zone means the local zone, as Kafka's
Utils.getDateTime), and ISO 8601 durations (``PT1H30M``, ``P2D``, ``-PT5M``) as java.time.Duration.parse."""

from __future__ import annotations

import re
from datetime import datetime


class TimestampError(ValueError):
    pass


def parse_timestamp(text: str) -> int:
    """Epoch milliseconds of `text`."""
    s = text.strip()
    if re.fullmatch(r"-?\d+", s):
        return int(s)
    try:
        dt = datetime.fromisoformat(s)
    except ValueError:
        raise TimestampError(
            f"Error parsing timestamp '{text}': use epoch milliseconds or 'yyyy-MM-ddTHH:mm:SS.sss' "
            "with an optional time zone (Z, +hh:mm)"
        ) from None
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time zone
    return int(dt.timestamp() * 1000)


_DURATION = re.compile(
    r"([-+]?)P(?:([-+]?\d+)D)?(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{0,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration_ms(text: str) -> int:
    """Milliseconds of an ISO 8601 duration (days, hours, minutes, seconds: java.time.Duration's subset)."""
    m = _DURATION.fullmatch(text.strip())
    if not m or not any(m.group(i) for i in range(2, 6)) or text.strip().upper().endswith("T"):
        raise TimestampError(f"Error parsing duration '{text}': use ISO 8601, e.g. PT1H30M, P1D, PT0.5S")
    sign, d, h, mi, s, frac = m.groups()
    ms = (int(d or 0) * 86400 + int(h or 0) * 3600 + int(mi or 0) * 60 + int(s or 0)) * 1000
    if frac:
        ms += int(frac.ljust(3, "0")[:3]) * (-1 if (s or "").startswith("-") else 1)
    return -ms if sign == "-" else ms
