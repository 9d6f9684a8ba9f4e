"""A tiny random-weight Llama with a locally trained BPE tokenizer, built offline.

vLLM (and the worker's ``--engine vllm --model PATH``) needs a real Hugging Face model folder,
and no model hub is reachable in tests or demos. :func:`build_tiny_model` writes one:

- a byte-level BPE tokenizer (``tokenizers``) trained on a small generated English-like
  corpus, wrapped as a ``PreTrainedTokenizerFast`` with ``<s>``/``</s>`` and a simple chat
  template;
- a ``LlamaForCausalLM`` (hidden 256, 2 layers, 4 heads, 2 KV heads) with seeded random
  weights, saved as safetensors in float32.

The weights are random, so the text it generates is noise; it is for exercising the engine
(startup, streaming, prefix caching, KV events, metrics), not for quality. Under vLLM's CPU
build it starts in 15-30 s and streams thousands of tokens/s.

The build is deterministic (fixed seeds) and idempotent: a folder that already holds a
complete model (``MARKER`` written last) is reused. Heavy imports (torch, transformers,
tokenizers) happen inside the functions, so importing this module is cheap.

Run it as ``python -m preheat.engine.tinymodel DIR``.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass
from pathlib import Path

MARKER = "preheat-tiny-model.json"

_WORDS_TEXT = (
    "the a an of to in on for with and or but not is are was were be been has have had "
    "it this that these those there here when where what which who how why all any each "
    "some many more most few one two three four five six seven eight nine ten hundred "
    "model token cache prefix block request worker router pool pod zone region queue "
    "latency stream prompt answer question user system assistant warm cold fast slow "
    "time first last next step batch prefill decode memory engine server client node "
    "route score scale replica standby active drain load ready start stop run send "
    "read write open close keep move make take give find show tell ask use try call "
    "good new old big small long short high low early late same other own right left "
    "day week year hour minute second world life hand part place case point number "
    "group problem fact water room mother area money story night city state name home"
)

_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}{{ eos_token }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the tiny model. The defaults are what tests and demos use."""

    vocab_size: int = 512
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 4096
    seed: int = 0
    corpus_lines: int = 4000


def _corpus(spec: TinyModelSpec) -> list[str]:
    rng = random.Random(spec.seed)
    vocabulary = _WORDS_TEXT.split()
    lines = []
    for _ in range(spec.corpus_lines):
        n = rng.randint(4, 16)
        words = [rng.choice(vocabulary) for _ in range(n)]
        words[0] = words[0].capitalize()
        lines.append(" ".join(words) + rng.choice((".", ".", "?", "!")))
    # Digits and punctuation so that any ASCII text tokenizes into few pieces.
    lines.extend(f"{i} {i * 7} {i % 13}:{i % 60:02d}, ({i})" for i in range(300))
    return lines


def _build_tokenizer(spec: TinyModelSpec, out: Path) -> int:
    """Trains and saves the tokenizer; returns its vocabulary size."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    special = ["<s>", "</s>", "<pad>"]
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab_size,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(spec), trainer=trainer)
    bos_id = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(
        single="<s> $A", pair="<s> $A <s> $B", special_tokens=[("<s>", bos_id)]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="</s>",
        pad_token="<pad>",
        model_max_length=spec.max_position_embeddings,
    )
    fast.chat_template = _CHAT_TEMPLATE
    fast.save_pretrained(str(out))
    return int(tok.get_vocab_size())


def build_tiny_model(directory: str | Path, spec: TinyModelSpec | None = None) -> Path:
    """Builds the tiny model into ``directory`` (created if needed) and returns its path.

    Reuses the folder when it already holds a complete build of the same spec.
    """
    spec = spec or TinyModelSpec()
    out = Path(directory)
    marker = out / MARKER
    wanted = json.dumps(spec.__dict__, sort_keys=True)
    if marker.exists() and marker.read_text() == wanted:
        return out
    out.mkdir(parents=True, exist_ok=True)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = _build_tokenizer(spec, out)
    # Fixed vocab size in the config (the tokenizer may learn slightly fewer tokens).
    vocab_size = max(vocab, spec.vocab_size)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config)
    model.save_pretrained(str(out), safe_serialization=True)
    marker.write_text(wanted)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m preheat.engine.tinymodel DIR", file=sys.stderr)
        return 2
    path = build_tiny_model(args[0])
    print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
