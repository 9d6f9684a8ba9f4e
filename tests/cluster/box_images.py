"""Images of the cluster in a box: an image is the Dockerfile that builds it, read for its
``ENTRYPOINT``, ``CMD`` and ``ENV``; its files are this checkout installed in ``.venv``
(what ``pip install .`` in the Dockerfile puts in the image)."""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# image repository (the chart's values, the operator's default worker image) -> Dockerfile
DOCKERFILES = {
    "preheat-worker": "Dockerfile.worker",
    "preheat-control": "Dockerfile.operator",
}


@dataclass(frozen=True)
class Image:
    dockerfile: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)

    def argv(self, command: list[str] | None, args: list[str] | None) -> list[str]:
        """What a container runs: ``command`` replaces ENTRYPOINT (and drops CMD),
        ``args`` replaces CMD (the Kubernetes rules)."""
        if command:
            return [*command, *(args or [])]
        return [*self.entrypoint, *(self.cmd if args is None else args)]


def repository(image: str) -> str:
    """``registry/path/name:tag@digest`` -> ``name``."""
    name = image.split("@", 1)[0].rsplit("/", 1)[-1]
    return name.split(":", 1)[0]


def _instruction_lines(text: str) -> list[str]:
    out, cur = [], ""
    for raw in text.splitlines():
        line = raw.strip()
        if not cur and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            cur += line[:-1] + " "
            continue
        out.append(cur + line)
        cur = ""
    return out


def _exec_form(rest: str) -> tuple[str, ...]:
    rest = rest.strip()
    if rest.startswith("["):
        return tuple(str(x) for x in json.loads(rest))
    return ("/bin/sh", "-c", rest)


def read_dockerfile(path: Path) -> Image:
    entrypoint: tuple[str, ...] = ()
    cmd: tuple[str, ...] = ()
    env: dict[str, str] = {}
    for line in _instruction_lines(path.read_text()):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":  # a new stage starts from nothing of ours
            entrypoint, cmd, env = (), (), {}
        elif word == "ENTRYPOINT":
            entrypoint, cmd = _exec_form(rest), ()
        elif word == "CMD":
            cmd = _exec_form(rest)
        elif word == "ENV":
            parts = shlex.split(rest)
            if parts and "=" not in parts[0]:
                env[parts[0]] = " ".join(parts[1:])
            else:
                env.update(p.split("=", 1) for p in parts)  # type: ignore[misc]
    return Image(dockerfile=path.name, entrypoint=entrypoint, cmd=cmd, env=env)


def image_for(image: str) -> Image:
    """The Dockerfile an image reference names; KeyError (with the known ones) if none."""
    name = repository(image)
    if name not in DOCKERFILES:
        raise KeyError(f"image {image!r}: no Dockerfile builds {name!r} (known: {DOCKERFILES})")
    return read_dockerfile(ROOT / DOCKERFILES[name])
