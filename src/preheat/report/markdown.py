"""Writes a benchmark's section into docs/benchmarks.md, keeping the other sections."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, name: str, body: str) -> None:
    """Replaces the text between ``<!-- bench:NAME -->`` markers (appending when absent)."""
    start, end = f"<!-- bench:{name} -->", f"<!-- /bench:{name} -->"
    block = f"{start}\n{body.rstrip()}\n{end}\n"
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    if start in text and end in text:
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        text = head + block + tail.lstrip("\n")
    else:
        text = text.rstrip("\n") + "\n\n" + block
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
