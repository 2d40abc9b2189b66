"""The real vLLM's command-line parser (the CPU venv's release, `make setup-vllm`): what `vllm serve` would hand the
engine for an argument vector, without starting it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

PARSE = r"""
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser

parser = FlexibleArgumentParser(prog="vllm")
ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
out = {}
for name, argv in json.loads(sys.stdin.read()).items():
    try:
        ns = parser.parse_args(argv)
    except (SystemExit, ValueError):  # vLLM would not start
        out[name] = None
        continue
    # What the engine is handed (EngineArgs.from_cli_args copies these fields; building it would fetch the model).
    cc = ns.compilation_config
    mode = getattr(cc, "cudagraph_mode", None) if not isinstance(cc, dict) else cc.get("cudagraph_mode")
    backend = getattr(ns, "attention_backend", None)
    if backend is None and getattr(ns, "attention_config", None) is not None:
        backend = getattr(ns.attention_config, "backend", None)
    out[name] = {"mode": getattr(mode, "name", None if mode is None else str(mode)), "eager": bool(ns.enforce_eager),
                 "model": getattr(ns, "model_tag", None) or ns.model, "attention_backend": str(backend)}
print("RESULT " + json.dumps(out))
"""


# vllm.__version__ without importing vLLM (3.7 s of CPU on the idle machine, more on a busy one): the release's own
# vllm/_version.py, which vllm/version.py imports it from, run alone.
VERSION = r"""
import importlib.util, os
spec = importlib.util.find_spec("vllm")  # the package's location; its __init__ does not run
path = os.path.join(spec.submodule_search_locations[0], "_version.py")
loader = importlib.util.spec_from_file_location("vllm_version_file", path)
module = importlib.util.module_from_spec(loader)
loader.loader.exec_module(module)
print(module.__version__)
"""


def version(python: Path) -> str:
    """vllm.__version__ of the release installed for `python`."""
    out = subprocess.run([str(python), "-c", VERSION], capture_output=True, text=True, check=True, timeout=120)
    return out.stdout.strip().splitlines()[-1]


def release(python: Path) -> str:
    """The vLLM release installed for `python`, without the local version ("0.32.0", not "0.32.0+cpu")."""
    return version(python).split("+", 1)[0]


def parse_with_vllm(python: Path, argvs: dict[str, list[str]], tmp: Path) -> dict[str, Any]:
    """`vllm serve` argument vectors (without the program) through the real release's parser and EngineArgs."""
    proc = subprocess.run(
        [str(python), "-c", PARSE],
        input=json.dumps(argvs),
        capture_output=True,
        text=True,
        timeout=600,
        env={
            "PATH": "/usr/bin:/bin",
            "VLLM_NO_USAGE_STATS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HOME": str(tmp),
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])
