"""Prompt tokenization at the router: text -> token ids -> prefix block hashes.

The router cuts a prompt into the same chained block hashes the workers report
(``preheat.core.blocks``), so its tokenizer must agree with the workers':

- ``sim`` / ``sim:VOCAB``: the sim engine's word-level tokenizer (vocabulary 32000 unless
  given; it must equal the sim workers' ``vocab_size`` for precise prefix matches).
- ``hf:PATH``: a Hugging Face tokenizer (``tokenizers``' ``tokenizer.json``, or a
  ``transformers`` directory), loaded lazily on first use so that start-up stays fast and
  the packages are needed only when asked for.

Tokenizing is CPU work on the event loop; the sim tokenizer costs microseconds per prompt,
an HF tokenizer a fraction of a millisecond for typical prompts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from preheat.core.blocks import block_hashes, tenant_root
from preheat.engine.simtokenizer import DEFAULT_VOCAB_SIZE, SimTokenizer


class PromptTokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...


class SimPromptTokenizer:
    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        self._tok = SimTokenizer(vocab_size)
        self.name = f"sim:{vocab_size}"

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text)


class HFPromptTokenizer:
    """A Hugging Face tokenizer at ``path`` (a ``tokenizer.json`` file or a directory)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = f"hf:{path}"
        self._encode: Callable[[str], list[int]] | None = None

    def _load(self) -> Callable[[str], list[int]]:
        p = Path(self.path)
        if p.is_file():
            from tokenizers import Tokenizer

            tok: Any = Tokenizer.from_file(str(p))
            return lambda text: list(tok.encode(text, add_special_tokens=False).ids)
        try:
            from transformers import AutoTokenizer
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise RuntimeError(
                f"--tokenizer hf:{self.path} needs the 'transformers' package for a directory "
                "(or point it at a tokenizer.json, which needs only 'tokenizers')"
            ) from e
        auto: Any = AutoTokenizer.from_pretrained(str(p))
        return lambda text: list(auto.encode(text, add_special_tokens=False))

    def encode(self, text: str) -> list[int]:
        if self._encode is None:
            self._encode = self._load()
        return self._encode(text)


def build_tokenizer(spec: str) -> PromptTokenizer:
    """``sim``, ``sim:VOCAB`` or ``hf:PATH``; raises ValueError with the accepted forms."""
    kind, _, arg = spec.partition(":")
    if kind == "sim":
        if not arg:
            return SimPromptTokenizer()
        try:
            vocab = int(arg)
        except ValueError:
            vocab = 0
        if vocab <= 0:
            raise ValueError(f"--tokenizer sim:VOCAB needs a positive integer, got {arg!r}")
        return SimPromptTokenizer(vocab)
    if kind == "hf" and arg:
        return HFPromptTokenizer(arg)
    raise ValueError(f"--tokenizer must be sim, sim:VOCAB or hf:PATH, got {spec!r}")


def prompt_block_hashes(
    tokens: Sequence[int], block_size: int, tenant: str = ""
) -> tuple[int, ...]:
    """The prompt's block names, salted with ``tenant`` when there is one."""
    return tuple(block_hashes(tokens, block_size, tenant_root(tenant)))
