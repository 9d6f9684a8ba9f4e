"""Prompt tokenization at the router: text -> token ids -> prefix block hashes.

The router cuts a prompt into the same chained block hashes the workers report
(``preheat.core.blocks``), so its tokenizer must agree with the workers':

- ``sim`` / ``sim:VOCAB``: the sim engine's word-level tokenizer (vocabulary 32000 unless
  given; it must equal the sim workers' ``vocab_size`` for precise prefix matches).
- ``hf:PATH``: a Hugging Face tokenizer (``tokenizers``' ``tokenizer.json``, or a
  ``transformers`` directory; the packages are needed only when asked for). The router
  loads it when it starts, in a thread and before it listens (:func:`load_tokenizer`): a
  first request that loaded it held the event loop for the load (10 s on a loaded 2-core
  machine, importing ``transformers``), long enough for every endpoint's metrics to look
  stale; and a path that cannot be loaded stops the router with the reason instead of
  failing every request.

Tokenizing is CPU work: the sim tokenizer costs microseconds per typical prompt, an HF
tokenizer a fraction of a millisecond, but a prompt of megabytes costs hundreds of
milliseconds. :func:`encode_within` counts tokens piece by piece and stops as soon as the
context window is exceeded (a 10 MB prompt is refused after tokenizing about one window's
worth), and the dispatcher runs large prompts in a small thread pool, off the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from preheat.core.blocks import block_hashes, tenant_root
from preheat.engine.simtokenizer import DEFAULT_VOCAB_SIZE, SimTokenizer


class PromptTokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...


class TextTokenizer(PromptTokenizer, Protocol):
    """What ``/tokenize`` and ``/detokenize`` need besides ``encode``."""

    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]: ...

    def decode(self, ids: list[int]) -> str: ...


#: Characters per piece when a long prompt is counted piece by piece (cut at whitespace).
PIECE_CHARS = 64 * 1024
#: Tokens a subword tokenizer may count differently per cut (pieces only stop early).
PIECE_SLACK_TOKENS = 4


class TokenizerLoadError(RuntimeError):
    """The router's tokenizer cannot be loaded (the path, the file, a missing package)."""


class TooManyTokens(Exception):
    """The prompt has more than ``limit`` tokens (``counted``: how many were seen)."""

    def __init__(self, counted: int, limit: int) -> None:
        super().__init__(f"more than {limit} tokens (stopped counting at {counted})")
        self.counted = counted
        self.limit = limit


_SPACES = (" ", "\n", "\t", "\r")


def _pieces(text: str, size: int) -> list[tuple[int, int]]:
    """``text`` cut into (start, end) spans of about ``size`` characters, each cut placed just
    before a whitespace character, so that no word is split (one longer word: one piece)."""
    spans = []
    start, n = 0, len(text)
    while start < n:
        end = min(n, start + size)
        if end < n:
            cut = max(text.rfind(c, start + 1, end + 1) for c in _SPACES)
            if cut > start:
                end = cut
            else:  # no whitespace in this piece: cut at the next one
                found = [i for c in _SPACES if (i := text.find(c, end)) >= 0]
                end = min(found) if found else n
        spans.append((start, end))
        start = end
    return spans


def encode_within(
    tokenizer: PromptTokenizer, text: str, limit: int, *, piece_chars: int = PIECE_CHARS
) -> list[int]:
    """``tokenizer.encode(text)``, or ``TooManyTokens`` as soon as more than ``limit`` tokens
    were counted: a long text is encoded piece by piece (cut before whitespace), so a prompt
    far over the window costs about ``limit`` tokens' work, not the whole text's.

    The sim tokenizer is word-level, so the pieces' ids are its ids for the whole text. For
    other tokenizers a text that fits is encoded once more as a whole, so the ids are exact
    (pieces are only used to stop early)."""
    if len(text) <= piece_chars:
        ids = tokenizer.encode(text)
        if len(ids) > limit:
            raise TooManyTokens(len(ids), limit)
        return ids
    exact = isinstance(tokenizer, SimPromptTokenizer)
    out: list[int] = []
    for i, (start, end) in enumerate(_pieces(text, piece_chars)):
        out.extend(tokenizer.encode(text[start:end]))
        # a subword tokenizer may merge a token or two across a cut: allow for it
        if len(out) > limit + (0 if exact else PIECE_SLACK_TOKENS * (i + 1)):
            raise TooManyTokens(len(out), limit)
    if exact:
        return out
    ids = tokenizer.encode(text)
    if len(ids) > limit:
        raise TooManyTokens(len(ids), limit)
    return ids


class SimPromptTokenizer:
    def __init__(self, vocab_size: int = DEFAULT_VOCAB_SIZE) -> None:
        self._tok = SimTokenizer(vocab_size)
        self.name = f"sim:{vocab_size}"

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text)

    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        """Ids and token strings (``/tokenize``); the sim tokenizer has no special tokens."""
        return self._tok.encode(text), text.split()

    def decode(self, ids: list[int]) -> str:
        """The text the sim engine writes for ``ids`` (its tokens are hashes of words, so a
        prompt's words cannot be recovered from them)."""
        return self._tok.decode(ids)


class HFPromptTokenizer:
    """A Hugging Face tokenizer at ``path`` (a ``tokenizer.json`` file or a directory)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.name = f"hf:{path}"
        self._tok: Any = None  # tokenizers.Tokenizer (a file) or a transformers tokenizer
        self._fast_file = Path(path).is_file()

    def load(self) -> None:
        """Loads the tokenizer now (once); raises :class:`TokenizerLoadError`."""
        self._load()

    @property
    def loaded(self) -> bool:
        return self._tok is not None

    def _load(self) -> Any:
        if self._tok is not None:
            return self._tok
        p = Path(self.path)
        if not p.exists():
            raise TokenizerLoadError(f"--tokenizer hf:{self.path}: no such file or directory")
        if self._fast_file:
            from tokenizers import Tokenizer

            try:
                self._tok = Tokenizer.from_file(str(p))
            except Exception as e:  # tokenizers raises its own Exception for a bad file
                raise TokenizerLoadError(f"--tokenizer hf:{self.path}: {e}") from e
            return self._tok
        try:
            from transformers import AutoTokenizer
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise TokenizerLoadError(
                f"--tokenizer hf:{self.path} needs the 'transformers' package for a directory "
                "(or point it at a tokenizer.json, which needs only 'tokenizers')"
            ) from e
        try:
            self._tok = AutoTokenizer.from_pretrained(str(p))
        except (OSError, ValueError) as e:
            raise TokenizerLoadError(f"--tokenizer hf:{self.path}: {e}") from e
        return self._tok

    def encode(self, text: str) -> list[int]:
        return self.tokenize(text, add_special_tokens=False)[0]

    def tokenize(self, text: str, add_special_tokens: bool) -> tuple[list[int], list[str]]:
        """Ids and token strings, as vLLM's ``/tokenize`` gives them."""
        tok = self._load()
        if self._fast_file:
            # encode_batch releases the GIL while it works (encode holds it: measured, a
            # 5 MB text held it 4 s), so the event loop runs while a thread tokenizes
            enc = tok.encode_batch([text], add_special_tokens=add_special_tokens)[0]
            return list(enc.ids), list(enc.tokens)
        ids = list(tok.encode(text, add_special_tokens=add_special_tokens))
        return ids, list(tok.convert_ids_to_tokens(ids))

    def decode(self, ids: list[int]) -> str:
        return str(self._load().decode(ids, skip_special_tokens=False))


def load_tokenizer(tokenizer: PromptTokenizer) -> None:
    """Loads ``tokenizer`` now if it loads lazily (an ``hf:`` one); a no-op otherwise.
    Raises :class:`TokenizerLoadError`."""
    if isinstance(tokenizer, HFPromptTokenizer):
        tokenizer.load()


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
