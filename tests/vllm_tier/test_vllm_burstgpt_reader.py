"""Our BurstGPT reader against vLLM's own (``vllm.benchmarks.datasets.BurstGPTDataset``).

vLLM's serving benchmark reads a BurstGPT CSV with pandas, keeps the ``GPT-4`` rows and drops
the failed requests (``Response tokens`` 0). ``preheat simulate``/``preheat load`` with
``--format burstgpt --trace-model GPT-4`` must replay the same requests: the same (prompt,
output) token counts, row for row. One difference is ours on purpose and checked here: a row
with 0 prompt tokens, which vLLM keeps (an empty prompt), is skipped and counted
(``no_prompt``), since no engine starts a request with nothing to prefill.
"""

from __future__ import annotations

import csv
import random
from collections import Counter
from pathlib import Path

import pytest

from preheat.workload.traces import TraceOptions, read_trace

pytestmark = pytest.mark.vllm

HEADER = ["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"]


def _write_burstgpt(path: Path, rows: int, seed: int) -> None:
    """A BurstGPT-shaped file: whole-second timestamps, both models, both log types, about
    5% failed requests (0 response tokens) and a few 0-token prompts."""
    rng = random.Random(seed)
    t = 0
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(HEADER)
        for _ in range(rows):
            t += rng.choice((0, 0, 1, 1, 2, 5))
            model = rng.choice(("ChatGPT", "ChatGPT", "GPT-4"))
            prompt = 0 if rng.random() < 0.02 else rng.randint(1, 4000)
            output = 0 if rng.random() < 0.05 else rng.randint(1, 1200)
            log = rng.choice(("Conversation log", "API log"))
            out.writerow([t, model, prompt, output, prompt + output, log])


@pytest.mark.parametrize("seed", [1, 2])
def test_gpt4_rows_match_vllms_burstgpt_dataset(tmp_path: Path, seed: int) -> None:
    from vllm.benchmarks.datasets import BurstGPTDataset

    path = tmp_path / "burstgpt.csv"
    _write_burstgpt(path, 3000, seed)

    theirs = BurstGPTDataset(dataset_path=str(path)).data
    their_pairs = Counter(
        (int(r["Request tokens"]), int(r["Response tokens"])) for _, r in theirs.iterrows()
    )
    ours = read_trace(path, TraceOptions(fmt="burstgpt", model="GPT-4"))
    our_pairs = Counter((r.input_tokens, r.output_tokens) for r in ours.requests)

    empty_prompts = sum(n for (prompt, _), n in their_pairs.items() if prompt == 0)
    assert empty_prompts > 0, "the file must hold 0-token prompts for the check to mean much"
    kept = Counter({pair: n for pair, n in their_pairs.items() if pair[0] > 0})
    assert our_pairs == kept
    assert ours.skipped.get("no_prompt", 0) == empty_prompts

    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    gpt4 = [r for r in rows if r["Model"] == "GPT-4"]
    failed = sum(1 for r in gpt4 if int(r["Response tokens"]) == 0)
    assert failed > 0
    assert len(theirs) == len(gpt4) - failed  # vLLM drops them too
    assert ours.skipped.get("no_output", 0) == failed
    assert ours.skipped.get("other_model", 0) == len(rows) - len(gpt4)
