"""The README's code runs as written.

- The "Calling a worker" section: its bash block starts a real sim worker (the command as
  written, with ``--grpc-port 0 --http-port 0`` appended so that the worker picks free ports
  and says which in its ``worker_ready`` line); its python block then runs as a script in a
  fresh interpreter, with the address it names replaced by the one the worker announced.
- Every other line of every bash block: a ``make TARGET`` names a target of the Makefile; a
  ``preheat ...`` command is parsed by the real CLI parser (running them would take minutes).
- Every inline ``preheat COMMAND ...`` in the text and the table names a real command (and
  subcommand), and every ``--flag`` it shows is one that command's ``--help`` lists.
"""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
from asyncio.subprocess import PIPE
from pathlib import Path

import pytest

from preheat.bench.workerproc import spawn_service
from preheat.cli import _COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.M | re.S)
WORKER_ADDRESS = "127.0.0.1:50051"


def blocks(text: str, lang: str) -> list[str]:
    return [body for kind, body in FENCE.findall(text) if kind == lang]


def section(title: str) -> str:
    start = README.index(f"## {title}\n")
    end = README.find("\n## ", start + 1)
    return README[start : end if end > 0 else None]


def commands(block: str) -> list[list[str]]:
    """Each command line of a bash block, split as the shell would (comments dropped)."""
    out = []
    for line in block.splitlines():
        argv = shlex.split(line, comments=True)
        if argv:
            out.append(argv)
    return out


def make_targets() -> set[str]:
    text = (REPO / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][\w-]*):", text, re.M))


def _parse(argv: list[str]) -> None:
    """``preheat ARGV`` through the real parser; a bad flag or value fails the test."""
    parser, _ = build_parser(argv[0])
    try:
        parser.parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"`preheat {shlex.join(argv)}` does not parse (exit {e.code})")


def test_every_bash_line_is_a_make_target_or_a_command_the_cli_accepts() -> None:
    targets = make_targets()
    seen = 0
    for block in blocks(README, "bash"):
        for argv in commands(block):
            seen += 1
            if argv[0] == "make":
                assert set(argv[1:]) <= targets, f"no such make target: {argv}"
            elif argv[0] == "preheat":
                _parse(argv[1:])
            else:
                pytest.fail(f"README bash line this test does not know how to check: {argv}")
    assert seen >= 5


def _inline_commands(text: str) -> list[str]:
    spans = re.findall(r"`(preheat [^`]+)`", text)
    return [s.replace("\\|", "|") for s in spans]


def _help_text(path: list[str]) -> str:
    parser, _ = build_parser(path[0])
    node = parser
    for name in path:
        node = next(
            a.choices[name]
            for a in node._actions
            if a.choices and isinstance(a.choices, dict) and name in a.choices
        )
    return node.format_help()


def test_every_inline_command_and_flag_exists() -> None:
    spans = _inline_commands(README)
    assert len(spans) >= 10
    for span in spans:
        words = span.split()[1:]
        assert words[0] in _COMMANDS, f"README names no such command: {span}"
        text = _help_text([words[0]])
        if len(words) > 1 and not words[1].startswith("-") and "|" in words[1]:
            for alt in words[1].split("|"):  # `preheat bench worker|router|sim`
                assert re.search(rf"^    {re.escape(alt)}\s", text, re.M), (
                    f"{span}: no `preheat {words[0]} {alt}`"
                )
            continue
        for flag in (w.split("=")[0] for w in words if w.startswith("--")):
            assert flag in text, f"{span}: `preheat {words[0]} --help` lists no {flag}"


async def test_calling_a_worker_runs_as_written(tmp_path: Path) -> None:
    part = section("Calling a worker")
    (start,) = [argv for b in blocks(part, "bash") for argv in commands(b)]
    assert start[:2] == ["preheat", "worker"]
    (script,) = blocks(part, "python")
    assert script.count(WORKER_ADDRESS) == 1  # the address the bash block's worker binds
    _parse(start[1:])
    async with spawn_service(
        "worker", [*start[2:], "--grpc-port", "0", "--http-port", "0"], ready_timeout_s=120
    ) as worker:
        path = tmp_path / "call_worker.py"
        path.write_text(script.replace(WORKER_ADDRESS, worker.grpc_target), encoding="utf-8")
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(path), stdout=PIPE, stderr=PIPE
        )
        out_b, err_b = await asyncio.wait_for(proc.communicate(), timeout=120)
    out, err = out_b.decode(), err_b.decode()
    assert proc.returncode == 0, err
    text, _, summary = out.rstrip("\n").rpartition("\n")
    assert text.strip(), out  # the generated text streamed
    assert re.fullmatch(r"16 tokens, TTFT \d+\.\d ms", summary), summary


def test_the_what_exists_table_has_every_command_and_nothing_unbuilt() -> None:
    table = section("What exists today")
    for name in _COMMANDS:
        if name == "demo":  # the one-worker demo is described above the table
            assert "`preheat demo`" in README
            continue
        assert f"`preheat {name}" in table, f"`preheat {name}` is missing from the table"
    assert "not built" not in table.lower()
