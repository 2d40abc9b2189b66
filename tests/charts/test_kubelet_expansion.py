"""Kubernetes rewrites what the chart judged: the kubelet expands `$(VAR)` in command, args and env values from the
container's environment, which a ConfigMap the chart never sees can fill. The chart refuses every unescaped `$(` in
what it renders into the vLLM and sidecar containers (templates/_command.tpl; `$$(` is the escape).

Checked by expanding the rendered pod spec the way the kubelet does (tests/support/kubelet_expansion.py, a port of
k8s.io/kubernetes third_party/forked/golang/expansion) and, for the bypasses, parsing the result with the real vLLM
parser of the CPU venv: what the chart refuses would have run a mode the chart refuses; what it renders runs the mode
it judged.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helm_chart import ROOT, container, effective, kinds, pod_spec, refusals, render, render_error  # noqa: E402
from test_chart import VALUE_SETS  # noqa: E402

if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from tests.support.kubelet_expansion import (  # noqa: E402
    container_env,
    expand,
    expand_container,
    mapping_func_for,
)

# --- the expansion itself (the cases of k8s expand_test.go's TestMapReference / TestMapping) --------------------------

CTX = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}


@pytest.mark.parametrize(
    "text,want",
    [
        ("$(VAR_A)", "A"),
        ("___$(VAR_B)___", "___B___"),
        ("$(VAR_A)-$(VAR_A)", "A-A"),
        ("f000-$$VAR_A", "f000-$VAR_A"),
        ("foo\\$(VAR_C)bar", "foo\\Cbar"),
        ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),
        ("$$(VAR_A)", "$(VAR_A)"),
        ("$$$(VAR_A)", "$A"),
        ("$$$$(VAR_A)", "$$(VAR_A)"),
        ("$$$$$(VAR_A)", "$$A"),
        ("$(VAR_REF)", "$(VAR_A)"),
        ("$(VAR_EMPTY)", ""),
        ("$(VAR_DNE)", "$(VAR_DNE)"),
        ("$(VAR_A", "$(VAR_A"),
        ("$(", "$("),
        ("$", "$"),
        ("$()", "$()"),
        ("$(VAR_A)$", "A$"),
        ("$VAR_A", "$VAR_A"),
        ("$$", "$"),
        ("$$$", "$$"),
        ("$(VAR_A)$(VAR_B", "A$(VAR_B"),
        ("--compilation-config=$(VAR_A)", "--compilation-config=A"),
        ("$(VAR_A)(VAR_B)", "A(VAR_B)"),
        ("$(VAR A)", "$(VAR A)"),
        ("$((VAR_A))", "$((VAR_A))"),
        ("", ""),
    ],
)
def test_expand(text: str, want: str) -> None:
    assert expand(text, mapping_func_for(CTX)) == want


def test_env_refers_only_to_earlier_variables_and_value_from_is_never_expanded() -> None:
    c = {
        "env": [
            {"name": "A", "value": "$(B)-x"},
            {"name": "B", "value": "b"},
            {"name": "C", "value": "$(B)$(A)"},
            {"name": "D", "valueFrom": {"configMapKeyRef": {"name": "m", "key": "k"}}},
            {"name": "E", "value": "$(D)"},
        ],
        "command": ["run", "$(A)"],
        "args": ["$(C)", "$(D)", "$(E)", "$(S)", "$$(A)"],
    }
    argv, env = expand_container(c, value_from={"D": "$(B)"}, service_env={"S": "svc", "B": "service-b"})
    assert env["A"] == "service-b-x"  # B was not defined yet in the container: the service variable
    assert env["C"] == "bservice-b-x" and env["D"] == "$(B)" and env["E"] == "$(B)"
    assert argv == ["run", "service-b-x", "bservice-b-x", "$(B)", "$(B)", "svc", "$(A)"]
    with pytest.raises(KeyError):
        container_env(c, value_from={})


# --- the chart refuses what the kubelet would rewrite ---------------------------------------------------------------

REF = "$(GRAPH)"


@pytest.mark.parametrize(
    "values,where",
    [
        ({"extraArgs": [REF]}, "extraArgs[0]"),
        ({"extraArgs": ["--served-model-name", "x", f"--max-model-len={REF}"]}, "extraArgs[2]"),
        ({"extraArgs": ["$$$(GRAPH)"]}, "extraArgs[0]"),
        ({"vllm.command": ["vllm", "serve", REF]}, "vllm.command[2]"),
        ({"model.name": f"org/{REF}"}, "model.name"),
        ({"model.servedName": REF}, "the sidecar argument"),
        ({"model.revision": REF}, "vLLM's --revision"),
        ({"compilation.compilationConfig": {"debug_dump_path": f"/tmp/{REF}"}}, "vLLM's --compilation-config"),
        (
            {"speculativeConfig": {"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_max": REF}},
            "vLLM's --speculative-config",
        ),
        ({"extraEnv": [{"name": "VLLM_LOGGING_LEVEL", "value": REF}]}, "env VLLM_LOGGING_LEVEL"),
        ({"sidecar.extraArgs": ["--log-level", REF]}, "the sidecar argument"),
        ({"sidecar.extraEnv": [{"name": "VLLM_HEALTH_LOG_LEVEL", "value": REF}]}, "sidecar.extraEnv[0]"),
    ],
)
def test_a_kubelet_reference_is_refused(values: dict[str, Any], where: str) -> None:
    lines = [line for line in refusals(values) if "the kubelet expands $(VAR)" in line]
    assert lines and any(where in line for line in lines), lines


def test_escaped_references_render_and_reach_vllm_as_literals() -> None:
    values = {
        "extraArgs": ["--chat-template", "$$(literal)"],
        "extraEnv": [{"name": "DEPLOY_NOTE", "value": "$$(x) $HOME $"}],
    }
    vllm = container(pod_spec(render(values)), "vllm")
    argv, env = expand_container(vllm, service_env={"literal": "INJECTED", "x": "INJECTED"})
    assert argv[-2:] == ["--chat-template", "$(literal)"]
    assert env["DEPLOY_NOTE"] == "$(x) $HOME $"


def test_the_chart_refuses_exactly_the_strings_the_kubelet_could_rewrite() -> None:
    """Random strings of `$`, `(`, `)` and letters as extraArgs items, one render: every item the chart lets
    through comes out of the kubelet unchanged but for `$$` -> `$`, whatever the environment holds; and every item
    whose expansion depends on the environment is refused."""
    rng = random.Random(18)
    items = sorted({"".join(rng.choice("$$$((a)_") for _ in range(rng.randint(1, 7))) for _ in range(400)})
    refused = {
        int(line.split("]", 1)[0].split("[", 1)[1])
        for line in refusals({"extraArgs": items})
        if line.startswith("extraArgs[")
    }

    def everything(name: str) -> str:
        return "INJECTED"

    def nothing(name: str) -> str:
        return mapping_func_for({})(name)

    for i, item in enumerate(items):
        rewritten = expand(item, everything) != expand(item, nothing)
        if i in refused:  # an unescaped `$(`: closed, the kubelet would read it as a reference
            assert expand(item + ")", everything) != expand(item + ")", nothing), item
        else:
            assert not rewritten, f"{item!r}: rendered, and the kubelet rewrites it"
    assert 20 < len(refused) < len(items) - 20, (len(refused), len(items))  # both outcomes are reached


@pytest.mark.parametrize("name", sorted(VALUE_SETS))
def test_no_rendered_container_is_rewritten_by_the_kubelet(name: str) -> None:
    """Every container of every value set the chart tests render, expanded with an environment that defines every
    name: the command line and the environment come out as rendered (but for `$$`). The one reference the chart
    writes itself, a Ray worker's $(LWS_LEADER_ADDRESS), is the LeaderWorkerSet controller's variable."""
    docs = render(VALUE_SETS[name])
    pods = []
    for d in docs:
        if d["kind"] == "Deployment":
            pods.append(d["spec"]["template"]["spec"])
        elif d["kind"] == "LeaderWorkerSet":
            pods += [d["spec"]["leaderWorkerTemplate"][r]["spec"] for r in ("leaderTemplate", "workerTemplate")]
    assert pods
    for spec in pods:
        for c in spec["containers"]:
            value_from = {e["name"]: "FROM-API" for e in c.get("env", []) if "valueFrom" in e}
            names = _referenced_names(c)
            argv, env = expand_container(c, value_from)
            argv2, env2 = expand_container(c, value_from, service_env={n: "INJECTED" for n in names})
            own = [e["name"] for e in c.get("env", [])]
            assert {n: env2[n] for n in own} == {n: env[n] for n in own}, c["name"]
            if any("$(LWS_LEADER_ADDRESS)" in a for a in c.get("args", [])):
                assert names == {"LWS_LEADER_ADDRESS"}, names
                assert argv2 == [a.replace("$(LWS_LEADER_ADDRESS)", "INJECTED") for a in argv]
            else:
                assert argv2 == argv and "INJECTED" not in json.dumps(argv2), (name, c["name"], names)


def _referenced_names(c: dict[str, Any]) -> set[str]:
    """Every name a `$(...)` in the container's strings could refer to (inside the parentheses)."""
    strings = [*c.get("command", []), *c.get("args", []), *(e.get("value", "") for e in c.get("env", []))]
    return {m for s in strings for m in re.findall(r"\$\(([^)]*)\)", str(s))}


# --- the real vLLM parser ---------------------------------------------------------------------------------------------

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


def _vllm() -> tuple[Path, str]:
    from tests.support.vllm_server import VLLM_PYTHON

    if not VLLM_PYTHON.exists():
        pytest.fail(f"{VLLM_PYTHON} missing: run `make setup-vllm`")
    version = (
        subprocess.run(
            [str(VLLM_PYTHON), "-c", "import vllm; print(vllm.__version__)"],
            capture_output=True,
            text=True,
            check=True,
            timeout=600,
        )
        .stdout.strip()
        .splitlines()[-1]
    )
    return VLLM_PYTHON, version.split("+", 1)[0]


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


def serve_argv(argv: list[str]) -> list[str]:
    """What `vllm serve` parses, from the container's argv (the image's entrypoint is `vllm serve "$@"`)."""
    assert argv[0] == "/opt/vllm-rocm/bin/vllm-serve.sh", argv
    return ["serve", *argv[1:]]


# A configuration the chart accepts in PIECEWISE and refuses in FULL (known issue mrv2-capture-stream-aiter-splitk:
# vLLM 0.22-0.28 on MI350/MI355 with AITER on and max_num_seqs above 64 aborts capturing full graphs). The venv's
# release (0.32) parses the arguments the chart renders for 0.22: the flags involved are the same in both.
REFUSED_ID = "mrv2-capture-stream-aiter-splitk"
BASE = {
    "attentionBackend": "TRITON_ATTN",
    "compilation.cudagraphMode": "PIECEWISE",
    "vllm.release": "0.22.1",
    "rocm.gpuArch": "gfx950",
    "maxNumSeqs": 65,
}
FROM_CONFIGMAP = {"name": "GRAPH", "valueFrom": {"configMapKeyRef": {"name": "tuning", "key": "graph"}}}
BYPASSES: dict[str, tuple[dict[str, Any], str]] = {
    # (values with `$$(` where the bypass has `$(`, what the ConfigMap holds)
    "extraArgs": (
        {"extraArgs": ["$$(GRAPH)"], "extraEnv": [FROM_CONFIGMAP]},
        '--compilation-config={"cudagraph_mode": "FULL"}',
    ),
    "json-inside-compilation-config": (
        {"compilation.compilationConfig": {"debug_dump_path": "/tmp/$$(GRAPH)"}, "extraEnv": [FROM_CONFIGMAP]},
        'x", "cudagraph_mode": "FULL',
    ),
    "model": ({"model.name": "$$(GRAPH)", "extraEnv": [FROM_CONFIGMAP]}, "someone/else"),
}


@pytest.mark.vllm_venv
def test_a_refused_reference_would_have_run_a_refused_mode(tmp_path: Path) -> None:
    """Each bypass as the chart used to render it (the escaped render with `$$(` turned back into `$(`: the chart
    passes these strings through unchanged), expanded with what the ConfigMap holds, parsed by the real vLLM: it
    runs what the chart refuses (FULL here, or another model). The chart refuses the unescaped values; the escaped
    render reaches vLLM as a literal and runs the judged mode."""
    python, _ = _vllm()
    base = dict(BASE)
    assert REFUSED_ID in render_error({**base, "compilation.cudagraphMode": "FULL"})  # FULL is refused
    judged = effective(base)
    argvs: dict[str, list[str]] = {}
    for name, (values, held) in BYPASSES.items():
        escaped = {**base, **values}
        unescaped = json.loads(json.dumps(escaped).replace("$$(", "$("))
        assert any("the kubelet expands $(VAR)" in line for line in refusals(unescaped)), name
        vllm = container(pod_spec(render(escaped)), "vllm")
        old = json.loads(json.dumps(vllm).replace("$$(", "$("))  # what the chart rendered before it refused
        argv, _ = expand_container(old, value_from={"GRAPH": held})
        argv = argv[2:] if argv[:2] == ["vllm", "serve"] else argv[1:]
        argvs[f"{name}:bypass"] = ["serve", *argv]
        argv, _ = expand_container(vllm, value_from={"GRAPH": held})
        argvs[f"{name}:rendered"] = ["serve", *(argv[2:] if argv[:2] == ["vllm", "serve"] else argv[1:])]
    argvs["judged"] = serve_argv(expand_container(container(pod_spec(render(base)), "vllm"))[0])
    got = parse_with_vllm(python, argvs, tmp_path)
    assert got["judged"] == {
        "mode": judged["configMode"],
        "eager": False,
        "model": "meta-llama/Llama-3.1-8B-Instruct",
        "attention_backend": got["judged"]["attention_backend"],
    }
    assert "TRITON_ATTN" in got["judged"]["attention_backend"]
    for name in BYPASSES:
        bypass = got[f"{name}:bypass"]
        assert bypass is not None, f"{name}: vLLM rejects the expanded bypass"
        if name == "model":  # another model than the one the sidecar and the baseline were told about
            assert bypass["model"] == "someone/else", bypass
        else:
            assert bypass["mode"] == "FULL", (name, bypass)  # what the chart refuses for these values
        rendered = got[f"{name}:rendered"]
        # The escaped literal either fails to parse (vLLM refuses to start: nothing runs) or runs the judged mode.
        assert rendered is None or (rendered["mode"], rendered["eager"]) == ("PIECEWISE", False), (name, rendered)


@pytest.mark.vllm_venv
def test_what_the_chart_renders_runs_the_judged_mode(tmp_path: Path) -> None:
    """Value sets the chart accepts, expanded by the kubelet rules and parsed by the real vLLM: the engine gets the
    compilation config and eager flag the chart judged (effective settings)."""
    python, version = _vllm()
    sets = {
        "default": {},
        "piecewise-triton": BASE,
        "eager": {"enforceEager": True, "compilation.cudagraphMode": "NONE"},
        "full-decode-only-sizes": {"compilation.cudagraphMode": "FULL_DECODE_ONLY", "compilation.captureSizes": [1, 2]},
        "escaped-args": {"extraArgs": ["--chat-template", "$$(GRAPH)"], "extraEnv": [FROM_CONFIGMAP]},
    }
    argvs, judged = {}, {}
    for name, values in sets.items():
        values = {**values, "vllm.release": version}
        judged[name] = effective(values)
        vllm = container(pod_spec(render(values)), "vllm")
        argvs[name] = serve_argv(expand_container(vllm, value_from={"GRAPH": "--enforce-eager"})[0])
    got = parse_with_vllm(python, argvs, tmp_path)
    for name, eff in judged.items():
        assert got[name] is not None, name
        assert (got[name]["mode"], got[name]["eager"]) == (eff["requestedMode"], eff["eager"]), (name, got[name])


def test_kinds_of_value_sets_cover_multinode() -> None:
    assert any("LeaderWorkerSet" in kinds(render(v)) for v in VALUE_SETS.values())
