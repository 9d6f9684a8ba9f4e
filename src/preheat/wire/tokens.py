"""Shared secrets read at start-up: a token from a file, else from an environment variable.

Used by the worker (its control and cache tokens), the router (the workers' cache token)
and the operator (the same). A file wins over the variable; surrounding whitespace is
stripped; an unreadable or empty file is a :class:`TokenError` naming the file (never its
content).
"""

from __future__ import annotations

import os


class TokenError(Exception):
    """A token file that cannot be read or is empty."""


def read_token(path: str, env_name: str) -> str:
    """The token in ``path`` (surrounding whitespace stripped), else in env ``env_name``
    ("" when neither is set)."""
    if not path:
        return os.environ.get(env_name, "").strip()
    try:
        with open(path, encoding="utf-8") as f:
            token = f.read().strip()
    except (OSError, UnicodeDecodeError) as e:
        raise TokenError(f"cannot read token file {path}: {type(e).__name__}") from None
    if not token:
        raise TokenError(f"token file {path} is empty")
    return token


def auth_metadata(token: str) -> tuple[tuple[str, str], ...]:
    """gRPC call metadata carrying ``token`` as ``authorization: Bearer``; none for ""."""
    return (("authorization", f"Bearer {token}"),) if token else ()


__all__ = ["TokenError", "auth_metadata", "read_token"]
