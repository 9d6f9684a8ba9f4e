"""Every container the chart renders runs a command `preheat` accepts: its `args` go through
the matching subcommand's own parser (the one `preheat` builds, preheat.cli.build_parser),
under the container's own environment, so a chart/CLI drift fails here and not in a
crash-looping pod.

Rendered with the default values and with every optional feature on. The control image's
entrypoint is read from Dockerfile.operator.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
from typing import Any

import pytest
from poolkit import ROOT
from test_chart_helm import ALL_ON, needs_helm, render

from preheat.cli import build_parser

# every feature that adds an argument or an env var to a container
ALL_FEATURES = [
    *ALL_ON,
    "--set",
    "workerCacheToken.secretName=worker-cache-token",
    "--set",
    "operator.logFormat=kv",
    "--set",
    "router.logLevel=DEBUG",
]
VALUE_SETS = {"defaults": [], "all-features": ALL_FEATURES}
# what a fieldRef / secretKeyRef env var holds at run time; the parser only needs it set
FROM_THE_CLUSTER = "set-by-the-cluster"


def _entrypoint(dockerfile: str) -> list[str]:
    text = (ROOT / dockerfile).read_text()
    (line,) = re.findall(r"^ENTRYPOINT\s+(\[.*\])\s*$", text, flags=re.MULTILINE)
    entry: list[str] = json.loads(line)
    return entry


def _containers(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for doc in docs:
        if doc["kind"] != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        for c in spec.get("initContainers", []) + spec["containers"]:
            out.append((f"{doc['metadata']['name']}/{c['name']}", c))
    return out


def _argv(container: dict[str, Any]) -> list[str]:
    """What the container executes, less the leading `preheat`."""
    control = _entrypoint("Dockerfile.operator")
    assert control[0] == "preheat", f"Dockerfile.operator's ENTRYPOINT is {control}"
    image = container["image"].rsplit("/", 1)[-1].split(":", 1)[0]
    assert image == "preheat-control", f"{container['name']} runs {container['image']}"
    command = container.get("command", control)
    assert command[0] == "preheat", f"{container['name']} runs {command}"
    return [*command[1:], *container.get("args", [])]


def _env(container: dict[str, Any]) -> dict[str, str]:
    return {
        e["name"]: str(e["value"]) if "value" in e else FROM_THE_CLUSTER
        for e in container.get("env", [])
    }


def _rejection(argv: list[str], env: dict[str, str]) -> str | None:
    """None if `preheat ARGV` parses under ENV; else the parser's message."""
    if not argv:
        return "no subcommand"
    saved = dict(os.environ)
    err = io.StringIO()
    try:
        os.environ.clear()
        os.environ.update({k: v for k, v in saved.items() if not k.startswith("PREHEAT_")})
        os.environ.update(env)
        parser, _ = build_parser(argv[0])  # defaults are read from the env here
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(err):
            parser.parse_args(argv)
    except SystemExit as e:
        lines = err.getvalue().strip().splitlines() or ["(no message)"]
        return f"exit {e.code}: {lines[-1]}"  # the usage lines before it say nothing more
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return None


def test_the_check_rejects_what_preheat_rejects() -> None:
    assert _rejection(["router", "--no-such-flag"], {}) is not None
    assert _rejection(["operator", "--log-level"], {}) is not None
    assert _rejection(["no-such-command"], {}) is not None
    assert _rejection(["worker", "--engine", "sim"], {}) is None


@needs_helm
@pytest.mark.parametrize("values", VALUE_SETS.values(), ids=VALUE_SETS.keys())
def test_every_rendered_container_args_parse(values: list[str]) -> None:
    containers = _containers(render(values))
    assert {name for name, _ in containers} >= {
        "pre-preheat-operator/operator",
        "pre-preheat-router/router",
    }
    rejected = []
    for name, container in containers:
        argv = _argv(container)
        why = _rejection(argv, _env(container))
        if why is not None:
            rejected.append(f"{name}: preheat {' '.join(argv)}\n  {why}")
    assert not rejected, "the chart runs commands preheat rejects:\n" + "\n".join(rejected)
