"""A benchmark's flags checked before it starts anything: every problem at once, each named
by its flag, so a bad value is one line and exit status 2, not a traceback minutes in."""

from __future__ import annotations

import math
from collections.abc import Sequence


class FlagCheck:
    """Collects :attr:`problems`; each method checks one flag."""

    def __init__(self) -> None:
        self.problems: list[str] = []

    def number(
        self, flag: str, value: float, low: float, *, strict: bool = False, high: float = math.inf
    ) -> None:
        """``value`` finite, ``>= low`` (``> low`` when ``strict``) and ``<= high``."""
        ok = math.isfinite(value) and (value > low if strict else value >= low) and value <= high
        if not ok:
            top = "" if math.isinf(high) else f" and <= {_num(high)}"
            self.problems.append(
                f"{flag} must be {'>' if strict else '>='} {low:g}{top} and finite, got {value}"
            )

    def listed(
        self,
        flag: str,
        text: str,
        kind: type[int] | type[float],
        low: float,
        *,
        strict: bool = False,
        empty: bool = False,
    ) -> None:
        """Comma-separated numbers of ``kind``, each as :meth:`number` checks it; at least
        one unless ``empty``."""
        parts = [x.strip() for x in str(text).split(",") if x.strip()]
        try:
            values = [kind(x) for x in parts]
        except ValueError:
            self.problems.append(f"{flag} wants comma-separated {kind.__name__}s, got {text!r}")
            return
        if not values and not empty:
            self.problems.append(f"{flag} names nothing")
        bad = [v for v in values if not (math.isfinite(v) and (v > low if strict else v >= low))]
        if bad:
            self.problems.append(
                f"{flag}: every value must be {'>' if strict else '>='} {low:g}, got {bad[0]}"
            )

    def names(self, flag: str, text: str, known: Sequence[str]) -> None:
        """Comma-separated names, each one of ``known``, at least one."""
        given = [x.strip() for x in str(text).split(",") if x.strip()]
        unknown = [n for n in given if n not in known]
        if unknown:
            self.problems.append(
                f"{flag}: unknown {', '.join(map(repr, unknown))}; known: {', '.join(known)}"
            )
        elif not given:
            self.problems.append(f"{flag} names nothing; known: {', '.join(known)}")

    def one_of(self, flag: str, value: object, allowed: Sequence[object]) -> None:
        if value not in allowed:
            self.problems.append(f"{flag} must be {' or '.join(map(str, allowed))}, got {value}")


def _num(x: float) -> str:
    """``1,000,000`` for a whole number, else ``0.5``."""
    return f"{x:,.0f}" if float(x).is_integer() else f"{x:g}"
