"""Kubernetes resource quantities, compared by value (``0.5`` == ``500m``, ``1Gi`` == ``1024Mi``).

The API server stores a quantity in its canonical form, not as it was sent: a Deployment
applied with ``cpu: "0.5"`` reads back ``500m``, ``memory: 1024Mi`` reads back ``1Gi``. A
text comparison of the two calls them different, and the operator patches the Deployment
again on every resync. :func:`parse_quantity` reads the format of the API's
``resource.Quantity`` (``<signed number><suffix>``: binary ``Ki Mi Gi Ti Pi Ei``, decimal
``n u m "" k M G T P E``, or a decimal exponent ``e3``/``E3``) into an exact ``Decimal``.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

_BINARY = {"Ki": 1, "Mi": 2, "Gi": 3, "Ti": 4, "Pi": 5, "Ei": 6}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_FORM = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))((?:[eE][+-]?\d+)|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]?)$")


class QuantityError(ValueError):
    """Text that is not a Kubernetes quantity; the message quotes it."""


def parse_quantity(value: str | int | float) -> Decimal:
    """The exact value of a quantity: ``"500m"`` -> 0.5, ``"1Gi"`` -> 1073741824."""
    text = str(value).strip()
    m = _FORM.match(text)
    if m is None:
        raise QuantityError(f"{text!r} is not a Kubernetes quantity (e.g. 500m, 2, 1Gi, 1e3)")
    number, suffix = m.groups()
    try:
        n = Decimal(number)
    except InvalidOperation as e:  # pragma: no cover - the pattern admits only numbers
        raise QuantityError(f"{text!r} is not a Kubernetes quantity") from e
    if suffix in _BINARY:
        return n * (Decimal(1024) ** _BINARY[suffix])
    if suffix in _DECIMAL:
        return n.scaleb(_DECIMAL[suffix])
    return n.scaleb(int(suffix[1:]))


def same_quantity(a: object, b: object) -> bool:
    """True when ``a`` and ``b`` are quantities of equal value; False when either is not one."""
    if isinstance(a, bool) or isinstance(b, bool):
        return False
    if not isinstance(a, str | int | float) or not isinstance(b, str | int | float):
        return False
    try:
        return parse_quantity(a) == parse_quantity(b)
    except QuantityError:
        return False
