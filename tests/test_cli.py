"""The ``preheat`` entry point imports only the subcommand it runs (the worker image has
no kopf, the operator image no vLLM)."""

import subprocess
import sys


def _modules_after(*argv: str) -> set[str]:
    code = (
        "import sys\n"
        "from preheat.cli import main\n"
        "try:\n"
        f"    main({list(argv)!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        "print(' '.join(sorted(sys.modules)))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return set(out.stdout.split())


def test_worker_subcommand_does_not_import_the_operator_or_router():
    mods = _modules_after("worker", "--help")
    assert "preheat.worker.main" in mods
    assert "kopf" not in mods
    assert "preheat.router.main" not in mods
    assert "preheat.operator.main" not in mods


def test_top_level_help_lists_every_subcommand():
    out = subprocess.run(
        [sys.executable, "-m", "preheat.cli", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    for name in ("worker", "router", "operator", "bench", "demo"):
        assert f"    {name} " in out
