"""The build targets of docker/docker-bake.hcl, read the way `docker buildx bake` reads them.

The bake file is what users build with, so the buildah builds take their Dockerfile, build arguments and tags
from it rather than from a second copy of the matrix. It is generated (docker/scripts/gen_bake.py) in a small
subset of HCL: `variable` blocks with a string default, `group`/`target` blocks whose attributes are strings,
lists of strings, variable references and `{ NAME = value }` maps, and `${VAR}` inside strings. Anything else
is refused with the line it is on, rather than guessed at. As with bake, an environment variable of a
variable's name overrides its default.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..config import REPO

BAKE_FILE = REPO / "docker" / "docker-bake.hcl"

_TOKEN = re.compile(
    r'(?P<ws>[ \t\r\n]+)|(?P<comment>(#|//)[^\n]*)|(?P<string>"(?:[^"\\\n]|\\.)*")'
    r"|(?P<ident>[A-Za-z_][A-Za-z0-9_-]*)|(?P<punct>[{}\[\]=,])"
)
_INTERP = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class BakeError(ValueError):
    """The bake file uses something this reader does not understand, or names something that does not exist."""


@dataclass(frozen=True)
class _Ref:
    name: str  # a bare variable reference, e.g. `BASE_DIGEST = BASE_DIGEST_0_33_0`


@dataclass
class Target:
    name: str
    dockerfile: str
    context: str = "."
    args: dict[str, str] = field(default_factory=dict)
    tags: list[str] = field(default_factory=list)


def _tokens(text: str) -> list[tuple[str, str, int]]:
    out, pos, line = [], 0, 1
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise BakeError(f"line {line}: unexpected {text[pos : pos + 20]!r}")
        kind = m.lastgroup or ""
        if kind not in ("ws", "comment"):
            out.append((kind, m.group(), line))
        line += m.group().count("\n")
        pos = m.end()
    return out


class _Parser:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def _peek(self) -> tuple[str, str, int]:
        return self.toks[self.i] if self.i < len(self.toks) else ("eof", "", -1)

    def _take(self, kind: str, value: str | None = None) -> str:
        k, v, line = self._peek()
        if k != kind or (value is not None and v != value):
            raise BakeError(f"line {line}: expected {value or kind}, found {v or 'end of file'!r}")
        self.i += 1
        return v

    def blocks(self) -> list[tuple[str, str, dict]]:
        out = []
        while self._peek()[0] != "eof":
            kind = self._take("ident")
            label = json.loads(self._take("string"))
            self._take("punct", "{")
            out.append((kind, label, self._body("}")))
        return out

    def _body(self, close: str) -> dict:
        attrs: dict = {}
        while self._peek()[1] != close:
            name = self._take("ident")
            self._take("punct", "=")
            attrs[name] = self._value()
            if self._peek()[1] == ",":
                self.i += 1
        self._take("punct", close)
        return attrs

    def _value(self) -> object:
        kind, v, line = self._peek()
        if kind == "string":
            self.i += 1
            return json.loads(v)
        if kind == "ident":
            self.i += 1
            return _Ref(v)
        if v == "[":
            self.i += 1
            items = []
            while self._peek()[1] != "]":
                items.append(self._value())
                if self._peek()[1] == ",":
                    self.i += 1
            self._take("punct", "]")
            return items
        if v == "{":
            self.i += 1
            return self._body("}")
        raise BakeError(f"line {line}: unsupported value {v!r}")


@dataclass
class BakeFile:
    variables: dict[str, str]
    targets: dict[str, Target]
    groups: dict[str, list[str]]

    def resolve(self, names: list[str]) -> list[Target]:
        """Targets by name, groups expanded (in order, each target once)."""
        out: dict[str, Target] = {}
        for name in names:
            members = self.groups.get(name, [name])
            for member in members:
                if member not in self.targets:
                    raise BakeError(
                        f"no target or group {member!r} in the bake file; targets: {', '.join(sorted(self.targets))}"
                    )
                out.setdefault(member, self.targets[member])
        return list(out.values())


def load(path: Path = BAKE_FILE, env: Mapping[str, str] | None = None) -> BakeFile:
    """Parse the bake file; variables take their defaults, overridden by `env` (default: os.environ)."""
    env = os.environ if env is None else env
    blocks = _Parser(path.read_text(encoding="utf-8")).blocks()
    variables = {
        label: str(env.get(label, body.get("default", ""))) for kind, label, body in blocks if kind == "variable"
    }

    def value(v: object, where: str) -> Any:  # a str, or a list/dict of them, as the HCL says: checked by the caller
        if isinstance(v, _Ref):
            if v.name not in variables:
                raise BakeError(f"{where}: {v.name} is not a declared variable")
            return variables[v.name]
        if isinstance(v, str):
            return _INTERP.sub(lambda m: value(_Ref(m.group(1)), where), v)
        if isinstance(v, list):
            return [value(x, where) for x in v]
        if isinstance(v, dict):
            return {k: value(x, f"{where}.{k}") for k, x in v.items()}
        raise BakeError(f"{where}: unsupported value {v!r}")

    raw = {label: body for kind, label, body in blocks if kind == "target"}
    groups = {
        label: value(body.get("targets", []), f"group {label}") for kind, label, body in blocks if kind == "group"
    }
    unknown = {kind for kind, _label, _body in blocks} - {"variable", "target", "group"}
    if unknown:
        raise BakeError(f"{path}: unsupported block types {sorted(unknown)}")

    def merged(name: str, seen: tuple[str, ...] = ()) -> dict:
        if name in seen:
            raise BakeError(f"target {name}: inherits itself through {' -> '.join(seen)}")
        if name not in raw:
            raise BakeError(f"target {seen[-1] if seen else name} inherits unknown target {name!r}")
        body = raw[name]
        out: dict = {}
        for parent in value(body.get("inherits", []), f"target {name}"):
            parent_body = merged(parent, (*seen, name))
            out.update({k: v for k, v in parent_body.items() if k != "args"})
            out["args"] = {**out.get("args", {}), **parent_body.get("args", {})}
        resolved = {k: value(v, f"target {name}.{k}") for k, v in body.items() if k != "inherits"}
        args = {**out.get("args", {}), **resolved.pop("args", {})}
        out.update(resolved)
        out["args"] = args
        return out

    targets = {}
    for name in raw:
        if name.startswith("_"):  # abstract bases such as _common
            continue
        body = merged(name)
        if "dockerfile" not in body:
            raise BakeError(f"target {name} names no dockerfile")
        targets[name] = Target(
            name=name,
            dockerfile=body["dockerfile"],
            context=body.get("context", "."),
            args={k: str(v) for k, v in body["args"].items()},
            tags=list(body.get("tags", [])),
        )
    return BakeFile(variables=variables, targets=targets, groups=groups)
