"""vLLM's engine config line, read by its structure rather than searched for substrings.

`Initializing a V1 LLM engine (v0.26.0) with config: model='...', speculative_config=None, ..., quantization=None,
..., kv_cache_dtype=auto, ..., compilation_config={...}, ...` (VllmConfig.__str__, 0.10.1.1 to 0.34.0) is a list of
top-level `key=value` items. Values are Python reprs (quoted strings with backslash escapes, `Cls(k=v, ...)`,
dicts, lists, `<Enum.X: v>`) or bare words; `compilation_config` is JSON up to 0.11 (`{"level":3,"cudagraph_mode":2}`)
and a dict repr from 0.14 (`{'mode': ..., 'cudagraph_mode': <CUDAGraphMode.FULL: 2>}`).

Several values carry text the operator or the model's files chose: the model path and tokenizer (quoted), the served
model name (bare), a quantization config the model ships (a dict of quoted strings). A substring search finds
`kv_cache_dtype=fp8` inside any of them. Here only top-level keys count, nested values stay values, and anything
that does not read as that structure (an unbalanced bracket, an unterminated string, an item without `key=`, a key
twice) is an error: the caller refuses the facts rather than guess (fail closed).
"""

from __future__ import annotations

import json
import re

_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_OPEN = {"(": ")", "[": "]", "{": "}"}
_CLOSE = frozenset(_OPEN.values())
MAX_LENGTH = 1 << 20  # a config line is ~5 KB; a megabyte is not one


class ConfigLineError(ValueError):
    """The text does not read as vLLM's config structure."""


def split_top(text: str, sep: str = ",") -> list[str]:
    """`text` split at `sep` where it is outside quotes and brackets; items stripped. Raises on unbalanced
    brackets and unterminated strings."""
    if len(text) > MAX_LENGTH:
        raise ConfigLineError(f"config text of {len(text)} characters")
    items: list[str] = []
    stack: list[str] = []
    quote = ""
    start = i = 0
    n = len(text)
    while i < n:
        c = text[i]
        if quote:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in _OPEN:
            stack.append(_OPEN[c])
        elif c in _CLOSE:
            if not stack or stack.pop() != c:
                raise ConfigLineError(f"unbalanced {c!r} at {i}")
        elif c == sep and not stack:
            items.append(text[start:i].strip())
            start = i + 1
        i += 1
    if quote:
        raise ConfigLineError("unterminated string")
    if stack:
        raise ConfigLineError(f"unclosed bracket (expected {stack[-1]!r})")
    items.append(text[start:].strip())
    return items


def parse_items(text: str) -> dict[str, str]:
    """`key=value, key=value, ...` at the top level -> {key: raw value}. Every item must be `key=`; no key twice."""
    out: dict[str, str] = {}
    for item in split_top(text):
        if not item:
            raise ConfigLineError("empty item")
        key, eq, value = item.partition("=")
        if not eq or not _KEY.fullmatch(key):
            raise ConfigLineError(f"item without key=: {item[:60]!r}")
        if key in out:
            raise ConfigLineError(f"key {key!r} twice")
        out[key] = value.strip()
    return out


def parse_mapping(raw: str) -> dict[str, str]:
    """`{'k': v, ...}` (dict repr) or `{"k":v,...}` (JSON) -> {k: raw value} of its top level only."""
    raw = raw.strip()
    if not (raw.startswith("{") and raw.endswith("}")):
        raise ConfigLineError(f"not a mapping: {raw[:40]!r}")
    body = raw[1:-1].strip()
    out: dict[str, str] = {}
    if not body:
        return out
    for item in split_top(body):
        key_raw, colon, value = _split_colon(item)
        if not colon:
            raise ConfigLineError(f"mapping item without key: {item[:60]!r}")
        key = unquote(key_raw)
        if key in out:
            raise ConfigLineError(f"mapping key {key!r} twice")
        out[key] = value.strip()
    return out


def parse_call(raw: str) -> tuple[str, dict[str, str]]:
    """`Name(k=v, ...)` -> (Name, {k: raw value})."""
    raw = raw.strip()
    m = re.match(r"([A-Za-z_][A-Za-z0-9_.]{0,99})\(", raw)
    if not m or not raw.endswith(")"):
        raise ConfigLineError(f"not a call: {raw[:40]!r}")
    body = raw[m.end() : -1]
    return m.group(1), (parse_items(body) if body.strip() else {})


def _split_colon(item: str) -> tuple[str, str, str]:
    """The key of a mapping item (a quoted string) and the rest after its colon."""
    item = item.strip()
    if not item or item[0] not in "'\"":
        return item, "", ""
    q = item[0]
    i = 1
    while i < len(item):
        if item[i] == "\\":
            i += 2
            continue
        if item[i] == q:
            rest = item[i + 1 :].lstrip()
            if rest.startswith(":"):
                return item[: i + 1], ":", rest[1:]
            return item, "", ""
        i += 1
    return item, "", ""


def unquote(raw: str) -> str:
    """A Python or JSON string literal -> its text; a bare word stays as it is."""
    raw = raw.strip()
    if len(raw) >= 2 and raw[0] == raw[-1] and raw[0] in "'\"":
        if raw[0] == '"':
            try:
                value = json.loads(raw)
                return value if isinstance(value, str) else raw
            except ValueError:
                pass
        return re.sub(r"\\(.)", r"\1", raw[1:-1])
    return raw


# cudagraph_mode as each release prints it: the enum repr (0.14+) or its JSON value (<=0.11)
_MODE_ENUM = re.compile(r"<CUDAGraphMode\.([A-Z_]{1,32}):.{0,20}>")
_JSON_MODE = {"0": "NONE", "1": "PIECEWISE", "2": "FULL", "[2,0]": "FULL_DECODE_ONLY", "[2,1]": "FULL_AND_PIECEWISE"}
_INT = re.compile(r"\d{1,6}")


def cudagraph_mode(raw: str) -> str:
    """The mode name of a `cudagraph_mode` value; raises when it is none of the spellings vLLM prints."""
    raw = raw.strip()
    m = _MODE_ENUM.fullmatch(raw)
    if m:
        return m.group(1)
    compact = re.sub(r"\s", "", raw)
    if compact in _JSON_MODE:
        return _JSON_MODE[compact]
    if compact.isdigit() or compact.startswith("["):
        raise ConfigLineError(f"cudagraph_mode {raw[:40]!r}")
    name = unquote(raw).upper()  # vLLM takes the name in any case (CUDAGraphMode[name.upper()])
    if re.fullmatch(r"[A-Z_]{1,32}", name):
        return name
    raise ConfigLineError(f"cudagraph_mode {raw[:40]!r}")


def _word(raw: str) -> str:
    """A bare or quoted scalar; "none" for Python's None."""
    text = unquote(raw)
    return "none" if text == "None" else text


def _int(raw: str, key: str) -> int:
    if not _INT.fullmatch(raw.strip()):
        raise ConfigLineError(f"{key}={raw[:20]!r} is not a count")
    return int(raw)


def engine_facts(config: str) -> dict:
    """The facts the sidecar conditions on, from the text after `with config: `. Keys a release does not print are
    absent; `cudagraph_mode` is required (every release from 0.10.1 prints it inside compilation_config)."""
    items = parse_items(config)
    facts: dict = {}
    cc = items.get("compilation_config")
    if cc is None:
        raise ConfigLineError("no compilation_config")
    comp = parse_mapping(cc)
    if "cudagraph_mode" not in comp:
        raise ConfigLineError("compilation_config carries no cudagraph_mode")
    facts["cudagraph_mode"] = cudagraph_mode(comp["cudagraph_mode"])
    if "enforce_eager" in items:
        value = items["enforce_eager"]
        if value not in ("True", "False"):
            raise ConfigLineError(f"enforce_eager={value[:20]!r}")
        facts["enforce_eager"] = value == "True"
    if "quantization" in items:
        facts["quantization"] = _word(items["quantization"])
    if "kv_cache_dtype" in items:
        facts["kv_cache_dtype"] = _word(items["kv_cache_dtype"])
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        if key in items:
            facts[key] = _int(items[key], key)
    if "speculative_config" in items:
        spec = items["speculative_config"]
        if spec == "None":
            facts["speculative_method"] = "none"
        else:
            _, kwargs = parse_call(spec)
            method = kwargs.get("method")
            facts["speculative_method"] = _word(method) if method is not None else "unknown"
    if "enable_prefix_caching" in items:
        facts["enable_prefix_caching"] = items["enable_prefix_caching"] == "True"
    return facts


def _mode_in(raw: str) -> str:
    """cudagraph_mode inside a compilation_config value of `non-default args`: a dict repr (0.26: its enum repr),
    a JSON object as typed on the command line (`{"cudagraph_mode": 2}`, `{"cudagraph_mode": "FULL"}`), or that
    JSON as a quoted string. "" when it carries none."""
    raw = raw.strip()
    if raw[:1] in "'\"":
        text = unquote(raw)
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise ConfigLineError(f"compilation_config {text[:40]!r} is not JSON") from exc
        if not isinstance(value, dict):
            raise ConfigLineError("compilation_config is not an object")
        mode = value.get("cudagraph_mode")
        if mode is None:
            return ""
        return cudagraph_mode(json.dumps(mode) if not isinstance(mode, str) else repr(mode))
    if raw == "None":
        return ""
    mapping = parse_mapping(raw)
    return cudagraph_mode(mapping["cudagraph_mode"]) if "cudagraph_mode" in mapping else ""


def args_facts(text: str) -> dict:
    """The facts of vLLM's `non-default args: {...}` line (a dict repr of what the command line set): the
    requested cudagraph_mode, --enforce-eager, --max-num-seqs. Top-level keys only; raises when the text does not
    read as a dict."""
    items = parse_mapping(text)
    facts: dict = {}
    if "compilation_config" in items:
        mode = _mode_in(items["compilation_config"])
        if mode:
            facts["cudagraph_mode"] = mode
    if items.get("enforce_eager") == "True":
        facts["enforce_eager"] = True
    if "max_num_seqs" in items:
        facts["max_num_seqs"] = _int(items["max_num_seqs"], "max_num_seqs")
    return facts
