"""Deterministic prompt text of an exact token length for the sim engine's word tokenizer.

The sim tokenizer makes one token of every whitespace-separated word, so ``n`` words are
``n`` tokens; the same seed gives the same text, so prompts built from equal leading
pieces share a cacheable prefix.
"""

from __future__ import annotations

import random

_SYLLABLES = ("ka", "lo", "mi", "ne", "su", "ta", "ri", "po", "ve", "zu", "an", "el")


def words(n: int, seed: int) -> str:
    """``n`` pseudo-words, the same for the same seed."""
    rng = random.Random(seed)
    return " ".join(
        "".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 3))) for _ in range(n)
    )
