"""Bounded YAML (``preheat.process.yamlfile``): what ``yaml.safe_load`` reads, less the
documents whose aliases expand past what any of our files needs, or refer to themselves."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from preheat.api.poolfile import PoolFileError, read_document
from preheat.process import yamlfile


def laughs(levels: int, then: str = "") -> str:
    """Nine lists of nine aliases of the list before, ``levels`` deep: ``9 ** (levels + 1)``
    strings from a few hundred bytes."""
    lines = ['l0: &l0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, levels + 1):
        lines.append(f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n" + then


def test_a_file_with_anchors_reads_as_safe_load_reads_it() -> None:
    text = (
        "base: &base {zone: a, gpu: h100}\n"
        "pods:\n  - {<<: *base, name: p1}\n  - {<<: *base, name: p2}\n"
        "same: [*base, *base]\n"
    )
    assert yamlfile.load(text) == yaml.safe_load(text)
    both = "a: 1\n---\n---\nb: [1, 2]\n"
    assert list(yamlfile.load_all(both)) == list(yaml.safe_load_all(both))
    assert yamlfile.load("") is None
    # four levels, 59,049 strings: under the bound (level five is 531,441, six 4.8 million)
    assert len(yamlfile.load(laughs(4))["l4"]) == 9


@pytest.mark.parametrize("levels", [6, 12])
def test_a_billion_laughs_is_refused_before_it_is_built(levels: int) -> None:
    with pytest.raises(yamlfile.YamlTooLarge, match=r"more than 1,000,000 values"):
        yamlfile.load(laughs(levels))
    with pytest.raises(yamlfile.YamlTooLarge, match=r"more than 1,000,000 values"):
        list(yamlfile.load_all("a: 1\n---\n" + laughs(levels)))


def test_an_alias_inside_its_own_anchor_is_refused() -> None:
    assert isinstance(yaml.safe_load("a: &a [1, *a]")["a"][1], list)  # a cycle, loaded
    with pytest.raises(yamlfile.YamlTooLarge, match="refers to its own anchor"):
        yamlfile.load("a: &a [1, *a]")
    with pytest.raises(yamlfile.YamlTooLarge, match="nested too deep"):
        yamlfile.load("[" * 100_000 + "]" * 100_000)


def test_a_pool_file_of_laughs_is_refused_before_it_is_walked(tmp_path: Path) -> None:
    # 1 KB of pool file held 10 GB and a minute under `preheat up` before it was killed:
    # the labels were walked nine levels deep
    pool = tmp_path / "pool.yaml"
    pool.write_text(
        laughs(
            8,
            "apiVersion: preheat.dev/v1alpha1\nkind: InferencePool\n"
            "metadata: {name: x, labels: {a: *l8}}\nspec: {model: {name: *l8}}\n",
        )
    )
    with pytest.raises(PoolFileError, match=r"expands to more than 1,000,000 values"):
        read_document(pool)
