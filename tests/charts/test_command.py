"""vllm.command is judged: the guard reads the arguments of `vllm serve`, so a command whose first words are not a
known vLLM entrypoint (files/vllm-settings.yaml `entrypoints`) is a wrapper it cannot see through, refused unless
vllm.commandIsWrapper=true acknowledges it; then NOTES say that only the sidecar's runtime rules protect the pod.
The same for the variables that decide which program runs (`programEnv`).

The wrappers are run for real (sh, bash, env) with a recorder named `vllm` first on PATH (it writes the argv and
environment it got, nothing else: a stand-in for the binary, not for vLLM's parser), and what they recorded is
parsed by the real vLLM of the CPU venv: each would have run a mode the chart refuses.
"""

from __future__ import annotations

import json
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chart_values import BASE, REFUSED_ID
from tests.support.helm_chart import CHART, ROOT, container, notes, pod_spec, refusals, render, render_error
from tests.support.vllm_parser import parse_with_vllm

SETTINGS = yaml.safe_load((CHART / "files" / "vllm-settings.yaml").read_text())
ENTRYPOINT = "/opt/vllm-rocm/bin/vllm-serve.sh"
WRAPPER = "is not a vLLM entrypoint the chart knows"


@pytest.mark.parametrize(
    "command",
    [
        [ENTRYPOINT],
        ["vllm", "serve"],
        ["/usr/local/bin/vllm", "serve"],
        ["/opt/venv/bin/vllm", "serve", "--disable-log-requests"],
        ["python3", "-m", "vllm.entrypoints.cli.main", "serve"],
        ["/opt/venv/bin/python3.12", "-m", "vllm.entrypoints.cli.main", "serve"],
        ["python", "-m", "vllm.entrypoints.cli.main", "serve"],
    ],
)
def test_known_entrypoints_render(command: list[str]) -> None:
    vllm = container(pod_spec(render({"vllm.command": command})), "vllm")
    assert vllm["command"] == command


@pytest.mark.parametrize(
    "command",
    [
        ["/bin/sh", "-c", 'exec vllm serve "$@"', "sh"],
        ["sh", "-ec", 'exec vllm serve "$@"', "sh"],
        ["bash", "-lc", 'vllm serve "$@"', "bash"],
        ["/bin/bash", "-o", "errexit", "-c", 'exec vllm serve "$@"', "x"],
        ["env", "VLLM_ROCM_USE_AITER=0", "vllm", "serve"],
        ["/usr/bin/env", "vllm", "serve"],
        ["python3", "-c", "import runpy, sys; runpy.run_module('vllm.entrypoints.cli.main', run_name='__main__')"],
        ["python3", "-m", "vllm.entrypoints.openai.api_server"],
        ["python3", "-I", "-m", "vllm.entrypoints.cli.main", "serve"],
        ["numactl", "--interleave=all", "vllm", "serve"],
        ["tini", "--", "vllm", "serve"],
        ["vllm"],
        ["vllm", "bench", "serve"],
        ["/models/bin/vllm", "serve"],  # inside the model cache volume: anything may have put it there
        ["/tmp/vllm", "serve"],
        ["/home/vllm/.local/bin/vllm", "serve"],
        ["/cache/vllm", "serve"],
        ["./vllm", "serve"],
        ["vllm-serve.sh"],
        ["/opt/vllm-rocm/bin/vllm-serve.sh.orig"],
    ],
)
def test_a_wrapper_is_refused_unless_acknowledged(command: list[str]) -> None:
    lines = refusals({"vllm.command": command})
    assert any(WRAPPER in line and "vllm.commandIsWrapper=true" in line for line in lines), lines
    docs = render({"vllm.command": command, "vllm.commandIsWrapper": True})
    assert container(pod_spec(docs), "vllm")["command"] == command
    text = notes({"vllm.command": command, "vllm.commandIsWrapper": True})
    assert "is a wrapper (vllm.commandIsWrapper=true)" in text
    assert "cannot see through it" in text and "mode_mismatch" in text and "known_issue" in text


def test_an_acknowledged_wrapper_still_has_its_vllm_arguments_judged() -> None:
    wrapper = {"vllm.command": ["sh", "-c", 'exec vllm serve "$@"', "sh"], "vllm.commandIsWrapper": True}
    lines = refusals({**wrapper, "extraArgs": ["-O3"]})
    assert lines and all(line.startswith("extraArgs[0]") for line in lines), lines
    assert refusals({**wrapper, "extraArgs": ["$(X)"]})
    # The multi-node leader runs the wrapper through its own script, with the same NOTES.
    docs = render({**wrapper, "multiNode.enabled": True, "tensorParallelSize": 8})
    lws = next(d for d in docs if d["kind"] == "LeaderWorkerSet")
    assert (
        container(lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"], "vllm")["args"][:4]
        == wrapper["vllm.command"]
    )


def test_an_acknowledgement_that_is_not_needed_is_refused() -> None:
    lines = refusals({"vllm.commandIsWrapper": True})
    assert any("drop vllm.commandIsWrapper" in line for line in lines), lines
    assert "/vllm/commandIsWrapper" in render_error({"vllm.commandIsWrapper": "yes"})


@pytest.mark.parametrize("name", SETTINGS["programEnv"])
def test_a_variable_that_picks_the_program_is_a_wrapper(name: str) -> None:
    lines = refusals({"extraEnv": [{"name": name, "value": "/models/bin"}]})
    assert any(f"extraEnv[0] {name} decides which program runs" in line for line in lines), lines
    assert render(
        {
            "extraEnv": [{"name": name, "value": "/models/bin"}],
            "vllm.command": ["sh", "-c", 'exec vllm serve "$@"', "sh"],
            "vllm.commandIsWrapper": True,
        }
    )


def test_the_images_entrypoint_is_vllm_serve_and_its_variables_are_judged() -> None:
    """The image's entrypoint (the chart's default) is `vllm serve "$@"` after the facts line; of the variables it
    reads, the ones that pick the binary or the facts are in programEnv, the log copy is reviewed harmless."""
    dockerfile = (ROOT / "docker" / "vllm-rocm" / "Dockerfile").read_text()
    assert re.search(r'^ENTRYPOINT \["' + re.escape(ENTRYPOINT) + r'"\]', dockerfile, flags=re.M)
    assert yaml.safe_load((CHART / "values.yaml").read_text())["vllm"]["command"] == [ENTRYPOINT]
    script = (ROOT / "docker" / "scripts" / "vllm-serve.sh").read_text()
    assert script.rstrip().splitlines()[-1] == 'exec "${VLLM_BIN:-vllm}" serve "$@"'
    read = set(re.findall(r"\$\{([A-Z_]+)[:}]", script)) - {"BASH_SOURCE"}
    harmless = {"VLLM_LOG_FILE"}  # a copy of the log, which also still goes to stdout
    assert read - harmless <= set(SETTINGS["programEnv"]), read - harmless
    assert read >= {"VLLM_BIN", "VLLM_PYTHON", "VLLM_IMAGE_VERSIONS_FILE", "VLLM_LOG_FILE"}, read


# --- run for real -----------------------------------------------------------------------------------------------------

RECORDER = """#!{python}
# Stand-in for the `vllm` binary: records the argv and environment it was started with, then exits.
import json, os, sys
json.dump({{"argv": sys.argv[1:], "env": dict(os.environ)}}, open(os.environ["RECORD"], "w"))
"""


def run_recorded(argv: list[str], tmp: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    rec = bindir / "vllm"
    rec.write_text(RECORDER.format(python=sys.executable))
    rec.chmod(rec.stat().st_mode | stat.S_IEXEC)
    record = tmp / "record.json"
    record.unlink(missing_ok=True)
    run_env = {"PATH": f"{bindir}:/usr/bin:/bin", "HOME": str(tmp), "RECORD": str(record), **(env or {})}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=run_env, cwd=tmp)
    assert proc.returncode == 0, proc.stderr
    return json.loads(record.read_text())


def test_the_images_entrypoint_passes_every_argument_through(tmp_path: Path) -> None:
    """The entrypoint script, run for real with the chart's arguments: `vllm` gets `serve` and them, unchanged (a
    JSON argument with quotes and spaces included)."""
    vllm = container(
        pod_spec(render({"compilation.compilationConfig": {"debug_dump_path": '/tmp/it\'s "here"'}})), "vllm"
    )
    script = ROOT / "docker" / "scripts" / "vllm-serve.sh"
    got = run_recorded(
        ["bash", str(script), *vllm["args"]], tmp_path, {"VLLM_IMAGE_VERSIONS_FILE": str(tmp_path / "none")}
    )
    assert got["argv"] == ["serve", *vllm["args"]]


WRAPPED = {
    # command: each starts `vllm serve` with a graph mode the guard never saw, or an environment it never judged
    "sh -ec": ["sh", "-ec", 'exec vllm serve "$@" --compilation-config \'{"cudagraph_mode": "FULL"}\'', "sh"],
    "bash -c": ["bash", "-c", 'vllm serve "$@" --compilation-config.cudagraph_mode=FULL', "bash"],
    "sh -c with a sourced file": ["sh", "-c", '. /dev/null; exec vllm serve "$@" -cc.cudagraph_mode=FULL', "sh"],
    "env VAR=": ["env", "VLLM_ROCM_USE_AITER=0", "vllm", "serve"],
}


@pytest.mark.integration
def test_refused_wrappers_would_have_run_what_the_chart_refuses(tmp_path: Path, vllm_python: Path) -> None:
    """Each wrapper with the arguments the chart renders for a configuration it accepts in PIECEWISE and refuses in
    FULL: run for real up to the `vllm` it starts, whose argv the real vLLM parser reads as FULL (or whose
    environment turns AITER off behind aiter.enabled=true). The chart refuses each of these commands; acknowledged,
    it renders them."""
    python = vllm_python
    base = dict(BASE)
    assert REFUSED_ID in render_error({**base, "compilation.cudagraphMode": "FULL"})  # a known issue refuses it
    args = container(pod_spec(render(base)), "vllm")["args"]
    chart_env = {e["name"]: e.get("value") for e in container(pod_spec(render(base)), "vllm")["env"]}
    argvs, envs = {}, {}
    for name, command in WRAPPED.items():
        assert any(WRAPPER in line for line in refusals({**base, "vllm.command": command})), name
        assert render({**base, "vllm.command": command, "vllm.commandIsWrapper": True})
        work = tmp_path / re.sub(r"\W+", "_", name)
        work.mkdir()
        got = run_recorded([*command, *args], work)
        assert got["argv"][0] == "serve", got["argv"]
        argvs[name], envs[name] = got["argv"], got["env"]
    parsed = parse_with_vllm(python, argvs, tmp_path)
    for name in WRAPPED:
        assert parsed[name] is not None, name
        if name == "env VAR=":
            assert parsed[name]["mode"] == "PIECEWISE"
            assert (chart_env["VLLM_ROCM_USE_AITER"], envs[name]["VLLM_ROCM_USE_AITER"]) == ("1", "0")
        else:
            assert parsed[name]["mode"] == "FULL", (name, parsed[name])


@pytest.mark.integration
def test_the_entrypoint_facts_hold_for_the_venvs_release(vllm_python: Path) -> None:
    """`python -m vllm.entrypoints.cli.main serve` is `vllm serve` (the console script names that module's main, which
    the module runs as __main__); `python -m vllm.entrypoints.openai.api_server` is not: its __main__ never reads the
    positional model (the chart renders the model positionally)."""
    python = vllm_python
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    site_path = Path(site)
    points = "\n".join(p.read_text() for p in site_path.glob("vllm*.dist-info/entry_points.txt"))
    assert re.search(r"^vllm\s*=\s*vllm\.entrypoints\.cli\.main:main$", points, flags=re.M), points
    main = (site_path / "vllm" / "entrypoints" / "cli" / "main.py").read_text()
    assert re.search(r'^if __name__ == "__main__":\n\s+main\(\)', main, flags=re.M)
    api = (site_path / "vllm" / "entrypoints" / "openai" / "api_server.py").read_text()
    block = api.split('if __name__ == "__main__":', 1)[1]
    if m := re.search(r"from (vllm[\w.]+) import main", block):  # 0.32 delegates to a launcher's main()
        launcher = (site_path / Path(*m.group(1).split("."))).with_suffix(".py").read_text()
        block += launcher.split("def main(", 1)[1].split("\ndef ", 1)[0]
    assert "parse_args()" in block and "model_tag" not in block, block
