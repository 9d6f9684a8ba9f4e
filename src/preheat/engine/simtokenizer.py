"""The sim engine's tokenizer: deterministic and word-level.

Every whitespace-separated word is one token, so a prompt of exactly N tokens is N words
(what a trace replayer needs). A word's id is a stable hash of the word (CRC-32, which is
the same in every process, unlike Python's salted ``hash``, and cheap enough for the
router's hot path) modulo the vocabulary. Generated ids detokenize to readable
pseudo-words (``" w1a2b"``), one per token, so text deltas have one word per token.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

DEFAULT_VOCAB_SIZE = 32000  # Llama-2-sized vocabulary; any size works
_CACHE_WORDS = 1 << 16  # words whose ids are remembered (prompts repeat words heavily)


class SimTokenizer:
    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        if vocab_size <= 0:
            raise ValueError(f"vocab_size must be > 0, got {vocab_size}")
        self.vocab_size = vocab_size
        self._ids: dict[str, int] = {}

    def token_id(self, word: str) -> int:
        return zlib.crc32(word.encode("utf-8")) % self.vocab_size

    def encode(self, text: str) -> list[int]:
        """One id per word; ids of recently seen words come from a bounded cache (the router
        tokenizes every prompt on its hot path)."""
        ids = self._ids
        words = text.split()
        try:
            return list(map(ids.__getitem__, words))  # all seen before: the common case
        except KeyError:
            pass
        vocab = self.vocab_size
        crc = zlib.crc32
        out: list[int] = []
        append = out.append
        for w in words:
            i = ids.get(w)
            if i is None:
                if len(ids) >= _CACHE_WORDS:
                    ids.clear()
                i = ids[w] = crc(w.encode("utf-8")) % vocab  # = token_id(w), inlined
            append(i)
        return out

    @staticmethod
    def token_text(token_id: int) -> str:
        """The text of one generated token: a space and a pseudo-word."""
        return f" w{token_id:x}"

    def decode(self, token_ids: Iterable[int]) -> str:
        return "".join(self.token_text(t) for t in token_ids)

    @staticmethod
    def prompt_of_length(n: int, salt: str = "") -> str:
        """A prompt of exactly ``n`` tokens (distinct words; ``salt`` varies the content)."""
        return " ".join(f"p{salt}{i}" for i in range(n))
