"""The server command template: one line that starts the vLLM under test for a given mode and port."""

from __future__ import annotations

import shlex

from vllm_rocm_core.qualification import compilation_config

EAGER = "eager"  # the --enforce-eager reference; not a cudagraph mode
_WORDS = ("{mode}", "{port}", "{model}", "{served_model_name}")


def mode_args(mode: str) -> list[str]:
    if mode == EAGER:
        return ["--enforce-eager"]
    return ["--compilation-config", compilation_config(mode)]


def check(template: str, fixed_port: int) -> None:
    """Refuse a template that cannot start a server per mode, before any server starts."""
    try:
        words = shlex.split(template)
    except ValueError as e:
        raise ValueError(f"--command does not split like a shell line: {e}") from e
    if not words:
        raise ValueError("--command is empty")
    if "{mode_args}" not in words and not any("{mode}" in w for w in words):
        raise ValueError("--command never says the mode: put {mode_args} (a word of its own) or {mode} in it")
    if not fixed_port and not any("{port}" in w for w in words):
        raise ValueError("--command has no {port}: put it where the server's port goes, or give --port")


def expand(template: str, mode: str, port: int, model: str, served_model_name: str, extra: str = "") -> list[str]:
    """argv for one server. `{mode}` is the cudagraph mode (NONE for the eager reference)."""
    values = {
        "{mode}": "NONE" if mode == EAGER else mode,
        "{port}": str(port),
        "{model}": model,
        "{served_model_name}": served_model_name,
    }
    argv: list[str] = []
    for word in shlex.split(template):
        if word == "{mode_args}":
            argv.extend(mode_args(mode))
            continue
        for key in _WORDS:
            word = word.replace(key, values[key])
        argv.append(word)
    return argv + shlex.split(extra)
