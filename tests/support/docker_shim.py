"""`docker`, for the tests that execute the READMEs' `docker run` lines: podman with this project's storage
(vllm_rocm_stack.images.podman), after the CPU overlay, on a machine without an AMD GPU or a Docker engine.

The test puts a `docker` script on PATH that runs this module, then runs each README line verbatim with bash (so
`$(getent ...)`, `$PWD` and quoting are the shell's, as for a user). Every command goes to podman unchanged except
`docker run`, which gets the CPU overlay: docker/compose.cpu.yaml applied to a command line, so one file says
what running without a GPU changes, for compose and for `docker run` alike:
- dropped: the flags of the keys compose.cpu.yaml resets (`devices` -> --device, `group_add` -> --group-add);
- the vLLM image -> $SHIM_VLLM_IMAGE (the image built on the CPU stand-in base), the sidecar image ->
  $SHIM_HEALTH_IMAGE;
- for a vLLM container that serves (arguments after the image, entrypoint not replaced): the arguments become
  compose.cpu.yaml's `command` (a local model instead of a hub name), its `environment` is added with -e, and the
  model directory $SHIM_MODEL_DIR is mounted where that command reads it;
- a published host port listed in $SHIM_PORTS ("8000=41234,9400=41235") is moved to a free one (the machine may
  run other servers).
What was changed is appended, one JSON object per command, to $SHIM_RECORD: the test reports it.
"""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
OVERLAY = REPO / "docker" / "compose.cpu.yaml"
# docker run options that take a value (the ones the READMEs use, and their long forms).
VALUE_OPTS = {
    "--device",
    "--group-add",
    "--ipc",
    "--security-opt",
    "-p",
    "--publish",
    "-v",
    "--volume",
    "-e",
    "--env",
    "--name",
    "--network",
    "--entrypoint",
    "--health-cmd",
    "-u",
    "--user",
    "-w",
    "--workdir",
    "--shm-size",
    "--label",
    "-l",
}
# compose keys the overlay resets -> the docker run flags that express them.
RESET_FLAGS = {"devices": ("--device",), "group_add": ("--group-add",)}


class _Reset:
    """A compose `!reset` value (Docker Compose 2.18+, podman-compose 1.1+): the key is removed from the merge."""


class _ComposeLoader(yaml.SafeLoader):
    pass


_ComposeLoader.add_constructor("!reset", lambda loader, node: _Reset())


def services(path: Path) -> dict:
    """A compose file's services as YAML reads them (`!reset` values as _Reset), before interpolation."""
    return yaml.load(path.read_text(), Loader=_ComposeLoader)["services"]  # noqa: S506 - safe + !reset


def overlay() -> dict:
    return services(OVERLAY)["vllm"]


def reset_keys() -> list[str]:
    """The vLLM service's keys compose.cpu.yaml resets."""
    return [k for k, v in overlay().items() if isinstance(v, _Reset)]


def interpolate(value: str, env: dict[str, str]) -> str:
    """compose's `${VAR}`, `${VAR:-default}` and `${VAR-default}` (what compose.cpu.yaml's command uses)."""

    def one(m: re.Match[str]) -> str:
        name, colon, default = m.group(1), m.group(2), m.group(3)
        got = env.get(name)
        if got is None or (colon and got == ""):
            return default or ""
        return got

    return re.sub(r"\$\{(\w+)(?:(:?)-([^}]*))?\}", one, value)


def split_run(args: list[str]) -> tuple[list[tuple[str, str | None]], str, list[str]]:
    """docker run ARGS -> (options as (flag, value|None), image, arguments after the image)."""
    opts: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        a = args[i]
        if not a.startswith("-"):
            return opts, a, args[i + 1 :]
        if "=" in a and a.split("=", 1)[0] in VALUE_OPTS:
            flag, value = a.split("=", 1)
            opts.append((flag, value))
        elif a in VALUE_OPTS:
            opts.append((a, args[i + 1]))
            i += 1
        else:
            opts.append((a, None))
        i += 1
    raise SystemExit("docker shim: `docker run` without an image")


def cpu_overlay(args: list[str], env: dict[str, str]) -> tuple[list[str], dict]:
    """The podman run arguments for `docker run ARGS` on this machine, and what was changed."""
    opts, image, rest = split_run(args)
    drop = {flag for key in reset_keys() for flag in RESET_FLAGS.get(key, ())}
    ports = dict(p.split("=", 1) for p in env.get("SHIM_PORTS", "").split(",") if p)
    changed: dict = {"dropped": [], "image": None, "ports": {}, "arguments": None, "added": []}
    out: list[str] = []
    for flag, value in opts:
        if flag in drop:
            changed["dropped"].append(f"{flag} {value}")
            continue
        if flag in ("-p", "--publish") and value:
            host_part, _, container = value.rpartition(":")
            ip, _, host_port = host_part.rpartition(":")
            if host_port in ports:
                value = f"{ip + ':' if ip else ''}{ports[host_port]}:{container}"
                changed["ports"][host_port] = ports[host_port]
        out += [flag] if value is None else [flag, value]
    if image.startswith("vllm-rocm-health"):
        new_image = env["SHIM_HEALTH_IMAGE"]
    elif image.startswith("vllm-rocm:"):
        new_image = env["SHIM_VLLM_IMAGE"]
        if rest and "--entrypoint" not in dict(opts):  # a vLLM that serves: the CPU server's arguments, env, model
            cpu = overlay()
            rest = [interpolate(str(a), env) for a in cpu["command"]]
            changed["arguments"] = rest
            for k, v in cpu["environment"].items():
                v = interpolate(str(v), env)
                out += ["-e", f"{k}={v}"]
                changed["added"].append(f"-e {k}={v}")
            mount = f"{env['SHIM_MODEL_DIR']}:/models/model:ro"
            out += ["-v", mount]
            changed["added"].append(f"-v {mount}")
    else:
        new_image = image
    changed["image"] = [image, new_image]
    return [*out, new_image, *rest], changed


def main(argv: list[str]) -> int:
    env = dict(os.environ)
    podman_env = json.loads(env["SHIM_PODMAN_ENV"])
    if argv[:1] == ["run"]:
        args, changed = cpu_overlay(argv[1:], env)
        argv = ["run", *args]
        with open(env["SHIM_RECORD"], "a", encoding="utf-8") as fh:
            fh.write(json.dumps({"podman": argv, **changed}) + "\n")
    os.execvpe("podman", ["podman", *argv], {**env, **podman_env})
    return 127


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
