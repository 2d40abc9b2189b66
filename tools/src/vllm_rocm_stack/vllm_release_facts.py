"""What a vLLM release's own files say about how `vllm serve` reads its configuration.

Static reads (ast and plain text) of a release tree from `vllm_releases.release_tree`; vLLM is never imported.
The chart's guard tests derive from these the spellings the chart must refuse in `extraArgs`/`extraEnv`, and the
release facts its effective-settings template encodes, so that a new release with a new alias or variable fails
the tests instead of slipping past the guard.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

ARG_UTILS = "vllm/engine/arg_utils.py"
ENVS = "vllm/envs.py"
ROCM = "vllm/platforms/rocm.py"
AITER_OPS = "vllm/_aiter_ops.py"
# FlexibleArgumentParser: its own module from 0.12, before that in vllm/utils/__init__.py.
PARSER_FILES = ("vllm/utils/argparse_utils.py", "vllm/utils/__init__.py")
# The compilation config: one vllm/config.py up to 0.10.0, a package after.
CONFIG_FILES = ("vllm/config/compilation.py", "vllm/config.py")
# Where VllmConfig applies its cudagraph rules: config/__init__.py up to 0.11, config/vllm.py from 0.12.
VLLM_CONFIG_FILES = ("vllm/config/vllm.py", "vllm/config/__init__.py", "vllm/config.py")
# ROCm attention-backend selection (platforms/rocm.py) and the AITER switches it asks (_aiter_ops.py, 0.14+).
BACKEND_SELECTORS = ("get_attn_backend_cls", "_get_backend_priorities")


@dataclass(frozen=True)
class Flag:
    options: tuple[str, ...]  # as the release writes them, e.g. ("--compilation-config", "-cc")
    dest: str  # the field it sets (EngineArgs or front-end)
    where: str  # file:line


@dataclass(frozen=True)
class ParserFacts:
    where: str  # the file that defines FlexibleArgumentParser
    underscores: bool  # `--a_b` is read as `--a-b` (between `--` and the first `.`)
    dotted: bool  # `--x.key v` / `-x.key=v` are gathered into `--x '{"key": v}'`
    dash_o: str  # what `-O<n>` becomes: "-O.level" (compilation level) or "--optimization-level"
    config_file: bool  # `--config FILE.yaml` is expanded into flags before parsing
    abbreviations: bool  # argparse accepts unique prefixes (allow_abbrev is never turned off)


def _first(tree: Path, names: tuple[str, ...]) -> Path:
    for name in names:
        if (tree / name).is_file():
            return tree / name
    raise FileNotFoundError(f"none of {names} in {tree}")


def _dest_of(call: ast.Call, options: list[str]) -> str:
    """The setting a flag writes, qualified by its config class: `**model_kwargs["enforce_eager"]` is
    "model.enforce_eager", `**attention_kwargs["backend"]` "attention.backend"; plain flags are "cli.<dest>"."""
    for kw in call.keywords:  # `**model_kwargs["enforce_eager"]`: a field of that config dataclass
        value = kw.value
        if (
            kw.arg is None
            and isinstance(value, ast.Subscript)
            and isinstance(value.slice, ast.Constant)
            and isinstance(value.value, ast.Name)
        ):
            return f"{value.value.id.removesuffix('_kwargs')}.{value.slice.value!s}"
    for kw in call.keywords:
        if kw.arg == "dest" and isinstance(kw.value, ast.Constant):
            return f"cli.{kw.value.value!s}"
    long = next((o for o in options if o.startswith("--")), options[0])
    return "cli." + long.lstrip("-").replace("-", "_")


def flags(tree: Path) -> list[Flag]:
    """Every `add_argument` of the engine (arg_utils.py) and the front-end (`*cli_args.py`) with string options."""
    files = [tree / ARG_UTILS, *sorted((tree / "vllm" / "entrypoints").rglob("*cli_args.py"))]
    out: list[Flag] = []
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (
                isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"
            ):
                continue
            options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
            if not options or not all(o.startswith("-") for o in options):
                continue  # positionals (the model tag)
            out.append(Flag(tuple(options), _dest_of(node, options), f"{path.relative_to(tree)}:{node.lineno}"))
    return out


def parser_facts(tree: Path) -> ParserFacts:
    path = next(
        p for p in (tree / n for n in PARSER_FILES) if p.is_file() and "class FlexibleArgumentParser" in p.read_text()
    )
    src = path.read_text()
    cls = next(
        n for n in ast.walk(ast.parse(src)) if isinstance(n, ast.ClassDef) and n.name == "FlexibleArgumentParser"
    )
    body = ast.get_source_segment(src, cls) or ""
    # The whole serve CLI (main parser, sub-parsers) is built from this class; nothing passes allow_abbrev=False.
    serve = tree / "vllm" / "entrypoints" / "cli" / "serve.py"
    no_abbrev = re.compile(r"allow_abbrev\s*=\s*False")
    abbreviations = not no_abbrev.search(body) and not (serve.is_file() and no_abbrev.search(serve.read_text()))
    if '"--optimization-level"' in body:
        dash_o = "--optimization-level"
    elif "-O.level" in body:
        dash_o = "-O.level"
    else:
        raise AssertionError(f"{path}: no -O rewrite found; read the parser and teach this function")
    return ParserFacts(
        where=str(path.relative_to(tree)),
        underscores='replace("_", "-")' in body or "replace('_', '-')" in body,
        dotted='processed_arg.split(".")' in body,
        dash_o=dash_o,
        config_file="_pull_args_from_config" in body,
        abbreviations=abbreviations,
    )


def env_vars(tree: Path) -> set[str]:
    """The keys of envs.py's `environment_variables` table: every variable the release reads through vllm.envs."""
    module = ast.parse((tree / ENVS).read_text())
    for node in module.body:
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if isinstance(target, ast.Name) and target.id == "environment_variables" and isinstance(node.value, ast.Dict):
            return {k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    raise AssertionError(f"{tree / ENVS}: no environment_variables table")


def _env_refs(node: ast.AST) -> set[str]:
    refs = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and sub.attr.startswith("VLLM_"):
            refs.add(sub.attr)
        elif (
            isinstance(sub, ast.Constant) and isinstance(sub.value, str) and re.fullmatch(r"VLLM_[A-Z0-9_]+", sub.value)
        ):
            refs.add(sub.value)
    return refs


def backend_env_vars(tree: Path) -> set[str]:
    """Variables the ROCm attention-backend selection reads, directly or through `rocm_aiter_ops.is_*()`."""
    rocm = ast.parse((tree / ROCM).read_text())
    selectors = [n for n in ast.walk(rocm) if isinstance(n, ast.FunctionDef) and n.name in BACKEND_SELECTORS]
    if not selectors:
        raise AssertionError(f"{tree / ROCM}: none of {BACKEND_SELECTORS}")
    found: set[str] = set()
    methods: set[str] = set()
    for fn in selectors:
        found |= _env_refs(fn)
        for sub in ast.walk(fn):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == "rocm_aiter_ops"
            ):
                methods.add(sub.func.attr)
    if methods:
        found |= _aiter_method_envs(tree, methods)
    return found


def _aiter_method_envs(tree: Path, methods: set[str]) -> set[str]:
    module = ast.parse((tree / AITER_OPS).read_text())
    cls = next(n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name.lower() == "rocm_aiter_ops")
    attr_env: dict[str, set[str]] = {}  # `_MHA_ENABLED = envs.VLLM_ROCM_USE_AITER_MHA`
    for sub in ast.walk(cls):
        if isinstance(sub, ast.Assign):
            for target in sub.targets:
                name = target.attr if isinstance(target, ast.Attribute) else getattr(target, "id", None)
                if name:
                    attr_env.setdefault(name, set()).update(_env_refs(sub.value))
    found: set[str] = set()
    pending, seen = set(methods), set()
    while pending:  # follow `cls.is_enabled()` inside `is_mha_enabled()` etc.
        name = pending.pop()
        seen.add(name)
        fn = next((n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == name), None)
        if fn is None:
            continue
        found |= _env_refs(fn)
        for sub in ast.walk(fn):
            if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "cls":
                found |= attr_env.get(sub.attr, set())
                if sub.attr not in seen:
                    pending.add(sub.attr)
    return found


def _strings(path: Path) -> str:
    """Every string literal of a file, one a line, with implicit concatenation and f-string text joined."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            out.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            out.append("".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values))
    return "\n".join(out)


def has_cudagraph_mode(tree: Path) -> bool:
    return "cudagraph_mode" in _first(tree, CONFIG_FILES).read_text()


def attention_split_ops(tree: Path) -> list[str]:
    """The decoder-attention ops in CompilationConfig._attention_ops (split out of piecewise graphs by default)."""
    module = ast.parse(_first(tree, CONFIG_FILES).read_text())
    for node in ast.walk(module):
        if not isinstance(node, (ast.Assign, ast.AnnAssign)):
            continue
        target = node.target if isinstance(node, ast.AnnAssign) else node.targets[0]
        if isinstance(target, ast.Name) and target.id == "_attention_ops" and isinstance(node.value, ast.List):
            ops = [e.value for e in node.value.elts if isinstance(e, ast.Constant) and isinstance(e.value, str)]
            return [op for op in ops if "unified_" in op and "attention" in op]
    raise AssertionError(f"{tree}: no CompilationConfig._attention_ops")


def empty_splitting_piecewise(tree: Path) -> str:
    """What PIECEWISE with `splitting_ops: []` becomes: "FULL" (0.10.1-0.11) or "NONE" (0.12+)."""
    text = _strings(_first(tree, CONFIG_FILES))
    if "PIECEWISE cudagraph_mode will be treated as FULL cudagraph_mode" in text:
        return "FULL"
    if re.search(
        r"empty splitting_ops do(?:es)? ?not ?contains? piecewise cudagraph\. Setting cudagraph_mode to NONE", text
    ):
        return "NONE"
    raise AssertionError(f"{tree}: empty-splitting_ops rule not found")


def non_vllm_compile_piecewise(tree: Path) -> str:
    """What a piecewise cudagraph_mode becomes under a compile mode other than VLLM_COMPILE / level 3:
    "assert" (vLLM refuses to start, <= 0.11), "NONE" (0.12-0.29) or "without_piecewise" (0.30+:
    PIECEWISE -> NONE, FULL_AND_PIECEWISE -> FULL_DECODE_ONLY)."""
    path = _first(tree, VLLM_CONFIG_FILES)
    text, code = _strings(path), path.read_text()
    if "without_piecewise()" in code:
        return "without_piecewise"
    if "is not compatible with compilation mode" in text:
        return "NONE"
    if "Compilation level should be CompilationLevel.PIECEWISE" in text:
        return "assert"
    raise AssertionError(f"{tree}: no rule for piecewise modes without VLLM_COMPILE")


def compile_keys(tree: Path) -> set[str]:
    """Which of CompilationConfig's compile settings the release has: `level` (up to 0.17), `mode` (0.12+)."""
    text = _first(tree, CONFIG_FILES).read_text()
    return {key for key in ("level", "mode") if re.search(rf"^    {key}\s*:", text, flags=re.M)}
