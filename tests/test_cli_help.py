"""Every ``--help`` runs, and every help text lists the subcommands its command has: the
one-line help that ``preheat --help`` shows for a command and the command's own ``--help``
name each of its subcommands (``bench`` once listed ``worker|router`` and omitted ``sim``)."""

from __future__ import annotations

import argparse
import re
import subprocess
import sys

import pytest

from preheat.cli import _COMMANDS, build_parser, main


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as done:
        main(argv)
    out = capsys.readouterr()
    assert done.value.code == 0, out.err
    assert out.out.startswith("usage: preheat")
    return out.out


def _walk(
    parser: argparse.ArgumentParser, path: list[str]
) -> list[tuple[list[str], list[str], str]]:
    """(path, its subcommands, the help line its parent shows for it) for every command."""
    out = []
    for name, sub in _subcommands(parser).items():
        line = ""
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                line = next((c.help or "" for c in action._choices_actions if c.dest == name), "")
        out.append(([*path, name], sorted(_subcommands(sub)), line))
        out += _walk(sub, [*path, name])
    return out


def _tree() -> list[tuple[list[str], list[str], str]]:
    out = []
    for name in _COMMANDS:
        parser, _ = build_parser(name)
        out += [t for t in _walk(parser, []) if t[0][0] == name]
    return out


TREE = _tree()


@pytest.mark.parametrize(("path", "subs", "line"), TREE, ids=[" ".join(t[0]) for t in TREE])
def test_every_help_runs_and_lists_its_subcommands(
    path: list[str], subs: list[str], line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _help([*path, "--help"], capsys)
    assert line, f"`preheat {' '.join(path)}` has no one-line help"
    for sub in subs:
        assert sub in line, f"the help line of `preheat {' '.join(path)}` omits {sub}: {line}"
        assert re.search(rf"^    {re.escape(sub)}\s", text, re.M), (
            f"`preheat {' '.join(path)} --help` omits {sub}"
        )


def test_the_tree_has_the_nested_commands() -> None:
    """The walk above sees nested subcommands (else the test would check nothing)."""
    assert (["bench"], ["forecast", "router", "sim", "traces", "vllm-serve", "worker"]) in [
        (p, s) for p, s, _ in TREE
    ]
    assert {" ".join(p) for p, _, _ in TREE} >= {"bench sim", "simulate", "up", "worker"}


def test_top_level_help_runs_as_a_process_and_lists_every_command() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "preheat.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    for name in _COMMANDS:
        assert f"    {name} " in out or f"    {name}\n" in out
    assert "add_arguments" not in out  # the user's description, not the module's docstring


def _options() -> list[tuple[str, argparse.Action]]:
    out = []

    def walk(parser: argparse.ArgumentParser, path: list[str]) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, [*path, name])
            elif action.help and action.option_strings:
                out.append((" ".join([*path, action.option_strings[-1]]), action))

    for name in _COMMANDS:
        parser, _ = build_parser(name)
        sub = _subcommands(parser)[name]
        walk(sub, [name])
    return out


def test_a_default_stated_in_a_help_text_is_the_default() -> None:
    """``(default 15)`` in a help text is what the flag defaults to (literal numbers and
    words; defaults resolved later, e.g. from --from-run, are None here and skipped)."""
    checked = 0
    for where, action in _options():
        m = re.search(r"\(default:? ([\w.]+)[,;)]", action.help or "")
        if m is None or action.default is None or isinstance(action.default, bool):
            continue
        stated, default = m.group(1), action.default
        if isinstance(default, int | float):
            try:
                value = float(stated)
            except ValueError:
                continue  # words like "(default CPUs)" say what 0 means
            assert value == float(default), f"{where}: help says {stated}, default {default}"
        else:
            assert stated == str(default), f"{where}: help says {stated}, default {default!r}"
        checked += 1
    assert checked >= 10
