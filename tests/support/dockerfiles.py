"""Dockerfiles as dockerfile-parse reads them: stages, ARG defaults and the values a stage's ${VAR}s resolve to (the
Dockerfile tests, and the image tests that compare a built image with its Dockerfile)."""

from __future__ import annotations

import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from dockerfile_parse import DockerfileParser

VAR = re.compile(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class Stage:
    base: str
    args: dict[str, str | None] = field(default_factory=dict)
    env: set[str] = field(default_factory=set)
    instructions: list[dict] = field(default_factory=list)


@dataclass
class Parsed:
    path: Path
    global_args: dict[str, str | None]
    stages: list[Stage]
    lines: list[str]


def parse(path: Path) -> Parsed:
    # fileobj: given a path, dockerfile-parse treats a name other than "Dockerfile" as a directory
    structure = DockerfileParser(fileobj=io.BytesIO(path.read_bytes())).structure
    global_args: dict[str, str | None] = {}
    stages: list[Stage] = []
    for ins in structure:
        name, value = ins["instruction"], ins["value"]
        if name == "FROM":
            stages.append(Stage(base=value.split()[0]))
            continue
        if name == "ARG":
            key, _, default = value.partition("=")
            (stages[-1].args if stages else global_args)[key.strip()] = default.strip().strip('"') if _ else None
        if not stages:
            continue
        if name == "ENV":
            stages[-1].env |= {tok.split("=", 1)[0] for tok in shlex.split(value) if "=" in tok}
        stages[-1].instructions.append(ins)
    return Parsed(path, global_args, stages, path.read_text().splitlines())


def resolve(text: str, values: dict[str, str | None]) -> str:
    return VAR.sub(lambda m: values.get(m.group(1)) or "", text.replace("${", "$").replace("}", ""))


def stage_values(p: Parsed, stage: Stage) -> dict[str, str | None]:
    values = dict(p.global_args)
    values.update({k: v if v is not None else p.global_args.get(k) for k, v in stage.args.items()})
    return values
