"""The chart's guard: everything vLLM reads about compilation and CUDA graphs goes through the typed values, and the
known-bad checks judge the effective settings (templates/_effective.tpl), never the raw values.

Which flags, aliases and environment variables must be refused is derived from the released files of every release
in GUARD_RELEASES (vllm_rocm_stack/vllm_release_facts.py reads them, nothing is imported); a release that adds a
compilation-affecting spelling fails here until the chart refuses it or it is reviewed below. The bypass table
renders through the real helm; `test_bypass_table_reaches_the_real_parser` parses the same table with the real vLLM
parser of the CPU venv, so no row is a spelling vLLM would not take.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from vllm_rocm_stack import vllm_release_facts as facts

from tests.support import vllm_parser
from tests.support.helm_chart import (
    CHART,
    arg_value,
    container,
    effective,
    notes,
    pod_spec,
    refusals,
    render,
    render_error,
)
from tests.support.vllm_releases import GUARD_RELEASES, release_tree

SETTINGS = yaml.safe_load((CHART / "files" / "vllm-settings.yaml").read_text())

# Flags whose setting the typed values own -> the typed value the refusal must name. Keys are the setting a flag
# writes, qualified by its config class as facts.flags() reports it.
GUARDED_FLAGS: dict[str, str] = {
    "vllm.compilation_config": "compilation.cudagraphMode",
    "vllm.optimization_level": "compilation.compilationConfig",
    "model.enforce_eager": "enforceEager",
    "scheduler.cuda_graph_sizes": "compilation.captureSizes",
    "model.max_seq_len_to_capture": "compilation.captureSizes",
    "compilation.cudagraph_capture_sizes": "compilation.captureSizes",
    "compilation.max_cudagraph_capture_size": "compilation.captureSizes",
    "attention.backend": "attentionBackend",
    "vllm.attention_config": "attentionBackend",
    "vllm.speculative_config": "speculativeConfig",
    "cli.speculative_config": "speculativeConfig",
    "speculative.method": "speculativeConfig",
    "speculative.model": "speculativeConfig",
    "speculative.num_speculative_tokens": "speculativeConfig",
    "cache.cache_dtype": "kvCacheDtype",
    "model.quantization": "quantization",
    "scheduler.max_num_seqs": "maxNumSeqs",
    "cli.max_num_seqs": "maxNumSeqs",
    "parallel.tensor_parallel_size": "tensorParallelSize",
    "parallel.pipeline_parallel_size": "multiNode",
    "parallel.distributed_executor_backend": "multiNode",
    "model.sleep_mode_offload_cudagraph": "does not support",
    "cli.config": "typed values",
}
# A flag whose setting or option matches this is compilation-affecting until reviewed: it must be in GUARDED_FLAGS
# or REVIEWED_FLAGS, so that a release adding one fails the test.
FLAG_NET = re.compile(
    r"compil|cudagraph|cuda[_-]graph|eager|capture|optimization|speculative|^spec[_-]|^attention\.|"
    r"attention[_-]config|^cli\.config$"
)
REVIEWED_FLAGS: dict[str, str] = {
    "observability.cudagraph_metrics": "log-only CUDA-graph statistics; changes no graph",
}

# Environment variables: a name matching ENV_NET, or one the ROCm attention-backend selection reads, must be refused
# by the chart or reviewed here as not changing the graph mode, the compiled graphs or the backend.
ENV_NET = re.compile(
    r"CUDAGRAPH|CUDA_GRAPH|COMPILE|DYNAMO|INDUCTOR|EAGER|MODEL_RUNNER|ATTENTION_BACKEND|^VLLM_USE_V1$|"
    r"^VLLM_ROCM_USE_AITER(_MHA)?$|UNIFIED_ATTENTION|PREFILL_DECODE_ATTENTION"
)
REVIEWED_ENV: dict[str, str] = {
    "VLLM_ENABLE_CUDAGRAPH_GC": "garbage collection during capture: memory and capture time only",
    "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS": "how graph memory is estimated while profiling",
    "VLLM_FLASH_ATTN_MAX_NUM_SPLITS_FOR_CUDA_GRAPH": "the CUDA FlashAttention backend only, never used on ROCm",
    "VLLM_DISABLE_COMPILE_CACHE": "turns the compile cache off: every start compiles afresh (the safe direction)",
    "VLLM_COMPILE_CACHE_SAVE_FORMAT": "the file format of the compile cache",
    "VLLM_ENABLE_INDUCTOR_MAX_AUTOTUNE": "Inductor kernel autotuning inside the same graphs",
    "VLLM_ENABLE_INDUCTOR_COORDINATE_DESCENT_TUNING": "Inductor kernel autotuning inside the same graphs",
    "VLLM_USE_PRECOMPILED": "build time only (setup.py)",
    "VLLM_USE_PRECOMPILED_RUST": "build time only (setup.py)",
    "VLLM_TEST_USE_PRECOMPILED_NIGHTLY_WHEEL": "build time only (setup.py)",
    "VLLM_SKIP_PRECOMPILED_VERSION_SUFFIX": "build time only (setup.py)",
    "VLLM_USE_RAY_COMPILED_DAG": "Ray's compiled-DAG executor, not torch.compile",
    "VLLM_USE_RAY_COMPILED_DAG_CHANNEL_TYPE": "Ray's compiled-DAG executor, not torch.compile",
    "VLLM_USE_RAY_COMPILED_DAG_OVERLAP_COMM": "Ray's compiled-DAG executor, not torch.compile",
}


def _owned(tree: Path) -> tuple[list[facts.Flag], list[facts.Flag]]:
    """The release's flags split into (guarded, reviewed); fails on a compilation-affecting flag that is neither."""
    guarded, reviewed, unknown = [], [], []
    for flag in facts.flags(tree):
        if flag.dest in GUARDED_FLAGS:
            guarded.append(flag)
        elif flag.dest in REVIEWED_FLAGS:
            reviewed.append(flag)
        elif FLAG_NET.search(flag.dest) or any(FLAG_NET.search(o.lstrip("-")) for o in flag.options):
            unknown.append(flag)
    assert not unknown, (
        f"{tree}: flags that may change compilation or CUDA graphs and that the chart neither refuses "
        f"nor has reviewed (add them to files/vllm-settings.yaml and GUARDED_FLAGS, or to "
        f"REVIEWED_FLAGS with a reason): {unknown}"
    )
    return guarded, reviewed


def spellings(option: str, parser: facts.ParserFacts) -> list[tuple[str, bool]]:
    """Every way the release's parser takes `option`, as (single extraArgs item, whether it names the option
    itself rather than an abbreviation that may also fit other options)."""
    out: list[tuple[str, bool]] = [(option, True), (f"{option}=1", True)]
    if option.startswith("--"):
        body = option[2:]
        out.append((f"--no-{body}", True))  # BooleanOptionalAction: get_kwargs makes every bool field one
        if parser.underscores and "-" in body:
            out += [(f"--{body.replace('-', '_')}", True), (f"--{body.replace('-', '_')}=1", True)]
        if parser.dotted:
            out += [(f"{option}.cudagraph_mode=FULL", True), (f"{option}.cudagraph_mode", True)]
        if parser.abbreviations:
            out += [(f"--{body[:k]}", False) for k in range(1, len(body))]
    else:
        if parser.dotted:
            out.append((f"{option}.cudagraph_mode=FULL", True))
        if len(option) == 2:
            out.append((f"{option}3", True))  # a one-letter option takes its value glued on
        out += [(option[:k], False) for k in range(2, len(option))]  # `-c` for `-cc`: argparse matches prefixes
    return out


def _refused_indices(lines: list[str], key: str) -> dict[int, str]:
    out = {}
    for line in lines:
        if m := re.match(rf"{re.escape(key)}\[(\d+)\] ", line):
            out[int(m.group(1))] = line
    return out


# --- derived from the released files --------------------------------------------------------------------------


@pytest.mark.parametrize("version", GUARD_RELEASES)
def test_every_spelling_of_every_owned_flag_is_refused(version: str) -> None:
    tree = release_tree(version)
    parser = facts.parser_facts(tree)
    guarded, reviewed = _owned(tree)
    dests = {f.dest for f in guarded}
    assert {"vllm.compilation_config", "model.enforce_eager", "cli.config"} <= dests, f"derivation found {dests}"
    items: list[tuple[str, str, bool]] = []  # (item, typed value, exact)
    for flag in guarded:
        for option in flag.options:
            items += [(item, GUARDED_FLAGS[flag.dest], exact) for item, exact in spellings(option, parser)]
    # -O3 / -O=3 / -O 3: FlexibleArgumentParser rewrites them into the level (up to 0.11) or --optimization-level
    # (0.12+, where -O is no option of its own and so is not in facts.flags()).
    items += [("-O3", "compilation.", True), ("-O=3", "compilation.", True), ("-O", "compilation.", True)]
    if parser.config_file:
        items += [("--config", "typed values", True), ("--config=/etc/vllm.yaml", "typed values", True)]
    lines = refusals({"vllm.release": version, "extraArgs": [i for i, _, _ in items]})
    refused = _refused_indices(lines, "extraArgs")
    missed = [item for n, (item, _, _) in enumerate(items) if n not in refused]
    assert not missed, f"vLLM {version} takes these but the chart renders them: {missed}"
    for n, (item, use, exact) in enumerate(items):
        if exact:
            assert use in refused[n], f"{item}: the refusal should name {use}: {refused[n]}"
    # What the release defines but the typed values do not own stays allowed (0.10.0 is refused as a whole).
    if facts.has_cudagraph_mode(tree):
        for flag in reviewed:
            assert render({"vllm.release": version, "extraArgs": [*flag.options, "--enable-prefix-caching"]})


@pytest.mark.parametrize("version", GUARD_RELEASES)
def test_every_graph_env_var_is_refused(version: str) -> None:
    tree = release_tree(version)
    defined = facts.env_vars(tree)
    backend = facts.backend_env_vars(tree)
    assert {"VLLM_ROCM_USE_AITER", "VLLM_ROCM_USE_AITER_MHA"} <= backend, f"derivation found {backend}"
    candidates = sorted({n for n in defined if ENV_NET.search(n)} | backend)
    must = [n for n in candidates if n not in REVIEWED_ENV]
    lines = refusals({"vllm.release": version, "extraEnv": [{"name": n, "value": "1"} for n in must]})
    refused = _refused_indices(lines, "extraEnv")
    missed = [n for i, n in enumerate(must) if i not in refused]
    assert not missed, f"vLLM {version} reads these (graphs, compile or backend) and the chart renders them: {missed}"
    ok = [n for n in candidates if n in REVIEWED_ENV]
    if facts.has_cudagraph_mode(tree):  # 0.10.0 is refused as a whole
        assert render({"vllm.release": version, "extraEnv": [{"name": n, "value": "1"} for n in ok]})


@pytest.mark.parametrize("version", GUARD_RELEASES)
def test_release_facts_the_chart_encodes(version: str) -> None:
    """Each release fact _effective.tpl uses, checked against that release's files."""
    tree = release_tree(version)
    parser = facts.parser_facts(tree)
    # The argument normalisation templates/_effective.tpl assumes (argRefusal).
    assert parser.underscores and parser.dotted and parser.config_file and parser.abbreviations, parser
    minor = tuple(int(x) for x in version.split(".")[:2])
    assert parser.dash_o == ("-O.level" if minor < (0, 12) else "--optimization-level"), parser
    if not facts.has_cudagraph_mode(tree):
        assert minor <= (0, 10) and version != "0.10.1.1"
        err = render_error({"vllm.release": version})
        assert "before 0.10.1 has no cudagraph_mode" in err and "vLLM 0.10.1 or later" in err
        return
    # splitting_ops: the ops the chart requires for attention to stay split include this release's.
    required = next(
        e["ops"]
        for e in SETTINGS["attentionSplitOps"]
        if not e["before"] or minor < tuple(int(x) for x in e["before"].split(".")[:2])
    )
    assert set(facts.attention_split_ops(tree)) <= set(required)
    base = {"vllm.release": version, "vllm.patched": True}
    eff = effective(
        {
            **base,
            "compilation.cudagraphMode": "FULL_AND_PIECEWISE",
            "compilation.compilationConfig": {"splitting_ops": facts.attention_split_ops(tree)},
        }
    )
    assert eff["mode"] == "FULL_AND_PIECEWISE" and not eff["attentionInPiecewiseGraphs"], eff
    # The compile setting: `level` and/or `mode`; the one the release lacks is refused (0.10/0.11 would ignore
    # `mode` silently, 0.18+ reject `level`).
    keys = facts.compile_keys(tree)
    assert keys, tree
    for key in ("level", "mode"):
        values = {**base, "compilation.compilationConfig": {key: 3}}
        if key in keys:
            assert effective(values)["compileModeKey"] == key
        else:
            assert f"compilation.compilationConfig.{key}:" in render_error(values)
    # PIECEWISE with splitting_ops []: FULL up to 0.11, NONE from 0.12.
    eff = effective(
        {**base, "compilation.cudagraphMode": "PIECEWISE", "compilation.compilationConfig": {"splitting_ops": []}}
    )
    assert eff["configMode"] == facts.empty_splitting_piecewise(tree), eff
    # A piecewise mode without VLLM_COMPILE / level 3.
    key = "level" if minor < (0, 12) else "mode"
    rule = facts.non_vllm_compile_piecewise(tree)
    values = {**base, "compilation.cudagraphMode": "FULL_AND_PIECEWISE", "compilation.compilationConfig": {key: 0}}
    if rule == "assert":
        assert "needs piecewise compilation" in render_error(values)
    else:
        assert effective(values)["configMode"] == ("NONE" if rule == "NONE" else "FULL_DECODE_ONLY")


# --- the bypass table ---------------------------------------------------------------------------------------------

FULL_JSON = '{"cudagraph_mode":"FULL"}'
UNPATCHED_0102 = {"vllm.release": "0.10.2", "vllm.patched": False}
BYPASSES: list[tuple[str, dict[str, Any], str, bool]] = [
    # (id, values, what every refusal line must name, real). The chart refuses every spelling any supported release
    # takes, whatever vllm.release says. `real`: the vLLM of the CPU venv takes the row and it changes what the engine
    # gets (test_bypass_table_reaches_the_real_parser checks it); rows for another release say so in vllm.release.
    (
        "underscore-separate-value",
        {"extraArgs": ["--compilation_config", FULL_JSON]},
        "compilation.cudagraphMode",
        True,
    ),
    ("dash-separate-value", {"extraArgs": ["--compilation-config", FULL_JSON]}, "compilation.cudagraphMode", True),
    ("equals", {"extraArgs": [f"--compilation-config={FULL_JSON}"]}, "compilation.cudagraphMode", True),
    ("underscore-equals", {"extraArgs": [f"--compilation_config={FULL_JSON}"]}, "compilation.cudagraphMode", True),
    ("dotted-equals", {"extraArgs": ["--compilation-config.cudagraph_mode=FULL"]}, "compilation.cudagraphMode", True),
    (
        "dotted-underscore",
        {"extraArgs": ["--compilation_config.cudagraph_mode", "FULL"]},
        "compilation.cudagraphMode",
        True,
    ),
    ("cc", {"extraArgs": ["-cc", FULL_JSON]}, "compilation.cudagraphMode", True),
    ("cc-equals", {"extraArgs": [f"-cc={FULL_JSON}"]}, "compilation.cudagraphMode", True),
    ("cc-dotted", {"extraArgs": ["-cc.cudagraph_mode=FULL"]}, "compilation.cudagraphMode", True),
    ("c-abbreviates-cc", {"extraArgs": ["-c", FULL_JSON]}, "compilation.cudagraphMode", True),
    ("c-dotted", {"extraArgs": ["-c.cudagraph_mode=FULL"]}, "compilation.cudagraphMode", True),
    ("long-abbreviation", {"extraArgs": ["--compilation", FULL_JSON]}, "compilation.cudagraphMode", True),
    ("short-abbreviation", {"extraArgs": [f"--compil={FULL_JSON}"]}, "compilation.cudagraphMode", True),
    ("O-json-0.10", {"vllm.release": "0.10.2", "extraArgs": ["-O", FULL_JSON]}, "compilation.cudagraphMode", False),
    (
        "O-dotted-0.10",
        {"vllm.release": "0.10.2", "extraArgs": ["-O.cudagraph_mode=FULL"]},
        "compilation.cudagraphMode",
        False,
    ),
    ("O3", {"extraArgs": ["-O3"]}, "compilation.compilationConfig", True),
    ("O-space-3", {"extraArgs": ["-O", "3"]}, "compilation.compilationConfig", True),
    ("O-equals-0", {"extraArgs": ["-O=0"]}, "compilation.compilationConfig", True),
    ("optimization-level", {"extraArgs": ["--optimization-level", "0"]}, "compilation.compilationConfig.mode", True),
    ("optimization-level-underscore", {"extraArgs": ["--optimization_level=0"]}, "compilation.compilationConfig", True),
    ("optimization-abbreviation", {"extraArgs": ["--opt", "0"]}, "compilation.compilationConfig", True),
    ("enforce-eager", {"extraArgs": ["--enforce-eager"]}, "enforceEager", True),
    ("enforce-eager-underscore", {"extraArgs": ["--enforce_eager"]}, "enforceEager", True),
    ("enforce-abbreviation", {"extraArgs": ["--enforce"]}, "enforceEager", True),
    (
        "no-enforce-eager",
        {"enforceEager": True, "compilation.cudagraphMode": "NONE", "extraArgs": ["--no-enforce-eager"]},
        "enforceEager",
        True,
    ),
    (
        "cuda-graph-sizes",
        {"vllm.release": "0.10.2", "extraArgs": ["--cuda-graph-sizes", "1", "2"]},
        "compilation.captureSizes",
        False,
    ),
    (
        "max-seq-len-to-capture",
        {"vllm.release": "0.10.2", "extraArgs": ["--max-seq-len-to-capture=512"]},
        "compilation.captureSizes",
        False,
    ),
    (
        "cudagraph-capture-sizes",
        {"extraArgs": ["--cudagraph_capture_sizes", "1", "2"]},
        "compilation.captureSizes",
        True,
    ),
    ("max-cudagraph-capture-size", {"extraArgs": ["--max-cudagraph", "8"]}, "compilation.captureSizes", True),
    ("config-file", {"extraArgs": ["--config", "/models/vllm.yaml"]}, "typed values", True),
    # vLLM expands only a separate `--config FILE`; `--config=FILE` is refused anyway (the check is on the option).
    ("config-file-equals", {"extraArgs": ["--config=/models/vllm.yaml"]}, "typed values", False),
    ("attention-backend", {"extraArgs": ["--attention_backend=ROCM_AITER_FA"]}, "attentionBackend", True),
    ("attention-config-dotted", {"extraArgs": ["-ac.backend=ROCM_AITER_FA"]}, "attentionBackend", True),
    (
        "speculative-config",
        {"extraArgs": ["-sc", '{"method":"ngram","num_speculative_tokens":3}']},
        "speculativeConfig",
        True,
    ),
    ("spec-tokens", {"extraArgs": ["--spec-tokens", "3"]}, "speculativeConfig", True),
    ("kv-cache-dtype", {"extraArgs": ["--kv-cache-dtype=fp8"]}, "kvCacheDtype", True),
    ("max-num-seqs", {"extraArgs": ["--max_num_seqs", "512"]}, "maxNumSeqs", True),
    ("tensor-parallel", {"extraArgs": ["-tp", "2"]}, "tensorParallelSize", True),
    (
        "sleep-mode-offload-cudagraph",
        {"vllm.release": "0.33.0", "extraArgs": ["--sleep-mode-offload-cudagraph"]},
        "does not support",
        False,
    ),
    ("future-graph-flag", {"extraArgs": ["--cudagraph-decoder-replay"]}, "compilation.*", False),
    ("in-vllm-command", {"vllm.command": ["vllm", "serve", "-O3"]}, "compilation.compilationConfig", True),
    # A shell is no vLLM entrypoint (templates/_command.tpl); `-c` is also a prefix of vLLM's -cc.
    ("shell-wrapper", {"vllm.command": ["/bin/sh", "-c", 'exec vllm serve "$@" -O3', "sh"]}, "vllm.command", False),
    # Environment variables.
    (
        "env-aiter",
        {"extraEnv": [{"name": "VLLM_ROCM_USE_AITER", "value": "1"}], "aiter.enabled": False},
        "aiter.enabled",
        False,
    ),
    (
        "env-aiter-mha",
        {
            **UNPATCHED_0102,
            "aiter.mha": False,
            "compilation.cudagraphMode": "FULL",
            "extraEnv": [{"name": "VLLM_ROCM_USE_AITER_MHA", "value": "1"}],
        },
        "aiter.mha",
        False,
    ),
    (
        "env-attention-backend",
        {"extraEnv": [{"name": "VLLM_ATTENTION_BACKEND", "value": "ROCM_AITER_FA"}]},
        "attentionBackend",
        False,
    ),
    (
        "env-from-secret",
        {"extraEnv": [{"name": "VLLM_ATTENTION_BACKEND", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}]},
        "attentionBackend",
        False,
    ),
    (
        "env-v0",
        {"vllm.release": "0.10.2", "extraEnv": [{"name": "VLLM_USE_V1", "value": "0"}]},
        "does not support",
        False,
    ),
    ("env-v2-runner", {"extraEnv": [{"name": "VLLM_USE_V2_MODEL_RUNNER", "value": "1"}]}, "does not support", False),
    (
        "env-breakable",
        {"extraEnv": [{"name": "VLLM_USE_BREAKABLE_CUDAGRAPH", "value": "1"}]},
        "compilation.cudagraphMode",
        False,
    ),
    (
        "env-no-pad",
        {"extraEnv": [{"name": "VLLM_DISABLE_PAD_FOR_CUDAGRAPH", "value": "1"}]},
        "compilation.captureSizes",
        False,
    ),
    (
        "env-torch-compile-disable",
        {"extraEnv": [{"name": "TORCH_COMPILE_DISABLE", "value": "1"}]},
        "compilation.compilationConfig",
        False,
    ),
    ("future-env", {"extraEnv": [{"name": "VLLM_CUDAGRAPH_SOMETHING_NEW", "value": "1"}]}, "compilation.*", False),
    # vLLM's log is where the sidecar reads what runs (issue 30): what would hide or reshape it, and ranks that
    # do not print the engine config line.
    ("env-logging-config", {"extraEnv": [{"name": "VLLM_LOGGING_CONFIG_PATH", "value": "/l.json"}]}, "log", False),
    ("env-no-logging", {"extraEnv": [{"name": "VLLM_CONFIGURE_LOGGING", "value": "0"}]}, "log format", False),
    ("env-logging-prefix", {"extraEnv": [{"name": "VLLM_LOGGING_PREFIX", "value": "[a] "}]}, "log format", False),
    ("env-logging-warning", {"extraEnv": [{"name": "VLLM_LOGGING_LEVEL", "value": "WARNING"}]}, "log level", False),
    (
        "env-logging-level-from-secret",
        {"extraEnv": [{"name": "VLLM_LOGGING_LEVEL", "valueFrom": {"configMapKeyRef": {"name": "c", "key": "k"}}}]},
        "log level",
        False,
    ),
    ("dp-rank", {"extraArgs": ["--data-parallel-rank=1"]}, "data-parallel rank", False),
    ("dp-rank-short", {"extraArgs": ["-dpn", "1"]}, "data-parallel rank", False),
    ("dp-start-rank", {"extraArgs": ["--data-parallel-start-rank", "2"]}, "data-parallel rank", False),
    # compilationConfig keys that set the mode behind cudagraphMode, or that this release does not read.
    (
        "use-cudagraph",
        {"vllm.release": "0.10.2", "compilation.compilationConfig": {"use_cudagraph": False}},
        "compilation.cudagraphMode",
        False,
    ),
    (
        "full-cuda-graph",
        {"vllm.release": "0.10.2", "compilation.compilationConfig": {"full_cuda_graph": True}},
        "compilation.cudagraphMode",
        False,
    ),
    ("mode-on-0.10", {"vllm.release": "0.10.2", "compilation.compilationConfig": {"mode": 0}}, "use level", False),
    ("level-on-0.20", {"vllm.release": "0.20.0", "compilation.compilationConfig": {"level": 0}}, "use mode", False),
    ("bad-mode", {"compilation.compilationConfig": {"mode": "FAST"}}, "must be 0-3", False),
    ("splitting-ops-not-a-list", {"compilation.compilationConfig": {"splitting_ops": "none"}}, "must be a list", False),
    (
        "piecewise-without-compile-0.11",
        {
            "vllm.release": "0.11.0",
            "compilation.cudagraphMode": "PIECEWISE",
            "compilation.compilationConfig": {"level": 0},
        },
        "needs piecewise compilation",
        False,
    ),
    ("release-without-cudagraph-mode", {"vllm.release": "0.10.0"}, "no cudagraph_mode", False),
]


@pytest.mark.parametrize("values,names", [pytest.param(v, n, id=i) for i, v, n, _ in BYPASSES])
def test_bypass_is_refused(values: dict[str, Any], names: str) -> None:
    lines = refusals(values)
    assert lines and all(names in line for line in lines), lines


@pytest.mark.parametrize("level", ["DEBUG", "info", "Info"])
def test_a_log_level_that_keeps_vllms_lines_is_accepted(level: str) -> None:
    env = {"name": "VLLM_LOGGING_LEVEL", "value": level}
    vllm = container(pod_spec(render({"extraEnv": [env]})), "vllm")
    assert env in vllm["env"]


def test_issue_bypass_underscore_flag_after_the_chart_flag() -> None:
    """The issue's first bypass: `--compilation_config` after the chart's own --compilation-config (vLLM reads `_` as
    `-`, the last flag wins) turned an unpatched 0.10.2 with AITER FA into FULL: silently wrong tokens."""
    lines = refusals({**UNPATCHED_0102, "extraArgs": ["--compilation_config", FULL_JSON]})
    assert lines == [
        'extraArgs[0] "--compilation_config" is vLLM\'s --compilation-config, which sets the compilation '
        "config (cudagraph_mode, capture sizes, compile mode; -cc from 0.12): set "
        "compilation.cudagraphMode, compilation.captureSizes and compilation.compilationConfig instead"
    ]


@pytest.mark.parametrize(
    "release,message",
    [
        ("0.10.2", "aiter-fa-full-cudagraph-always"),  # ALWAYS declared: FULL is honoured and wrong
        ("0.10.1.1", "aiter-fa-cudagraph-dead-flag"),  # NEVER: capture raises
    ],
)
def test_issue_bypass_empty_splitting_ops_is_full_on_010(release: str, message: str) -> None:
    """The issue's second bypass: PIECEWISE with `splitting_ops: []` on 0.10.x is FULL inside vLLM."""
    values = {
        "vllm.release": release,
        "vllm.patched": False,
        "compilation.cudagraphMode": "PIECEWISE",
        "compilation.compilationConfig": {"splitting_ops": []},
    }
    err = render_error(values)
    assert message in err and "which vLLM" in err and "runs as FULL" in err and "splitting_ops=[]" in err
    # The same with the patch: allowed, and everything that reads the effective settings sees FULL.
    eff = effective({**values, "vllm.patched": True})
    assert (eff["requestedMode"], eff["configMode"], eff["mode"]) == ("PIECEWISE", "FULL", "FULL")
    side = container(pod_spec(render({**values, "vllm.patched": True})), "health")
    assert arg_value(side["args"], "--expected-mode") == "FULL"
    want = f"Requested cudagraph_mode: PIECEWISE; vLLM {eff['releasePatch']} will run FULL (splitting_ops=[]: "
    assert want in notes({**values, "vllm.patched": True})


@pytest.mark.parametrize(
    "values",
    [
        # FULL_AND_PIECEWISE with attention left inside the pieces: as wrong as FULL on unpatched 0.10.2.
        {
            **UNPATCHED_0102,
            "compilation.cudagraphMode": "FULL_AND_PIECEWISE",
            "compilation.compilationConfig": {"splitting_ops": []},
        },
        {
            **UNPATCHED_0102,
            "compilation.cudagraphMode": "FULL_AND_PIECEWISE",
            "compilation.compilationConfig": {"splitting_ops": ["vllm.unified_attention"]},
        },
        {
            **UNPATCHED_0102,
            "compilation.cudagraphMode": "PIECEWISE",
            "compilation.compilationConfig": {
                "splitting_ops": ["vllm::unified_attention", "vllm::unified_attention_with_output"]
            },
        },  # 0.12+ names
    ],
)
def test_attention_inside_piecewise_graphs_is_judged_full(values: dict[str, Any]) -> None:
    assert "aiter-fa-full-cudagraph-always [wrong_tokens]" in render_error(values)
    eff = effective({**values, "vllm.patched": True})
    assert eff["mode"] == "FULL" and eff["attentionInPiecewiseGraphs"] is True, eff


@pytest.mark.parametrize(
    "values,config,mode",
    [
        (
            {
                "vllm.release": "0.14.0",
            },
            "FULL_AND_PIECEWISE",
            "FULL_AND_PIECEWISE",
        ),
        ({"vllm.release": "0.14.0", "enforceEager": True}, "NONE", "NONE"),
        (
            {
                "vllm.release": "0.10.2",
                "compilation.cudagraphMode": "FULL_AND_PIECEWISE",
                "compilation.compilationConfig": {
                    "splitting_ops": [
                        "vllm.unified_attention",
                        "vllm.unified_attention_with_output",
                        "vllm.mamba_mixer2",
                    ]
                },
            },
            "FULL_AND_PIECEWISE",
            "FULL_AND_PIECEWISE",
        ),
        (
            {
                "vllm.release": "0.10.2",
                "compilation.cudagraphMode": "FULL_AND_PIECEWISE",
                "compilation.compilationConfig": {"splitting_ops": []},
            },
            "FULL_AND_PIECEWISE",
            "FULL",
        ),
        (
            {
                "vllm.release": "0.10.2",
                "compilation.cudagraphMode": "FULL",
                "compilation.compilationConfig": {"level": 0},
            },
            "FULL",
            "FULL",
        ),
        (
            {
                "vllm.release": "0.11.0",
                "compilation.cudagraphMode": "PIECEWISE",
                "compilation.compilationConfig": {"splitting_ops": [], "use_inductor_graph_partition": True},
            },
            "PIECEWISE",
            "PIECEWISE",
        ),
        (
            {
                "vllm.release": "0.14.0",
                "compilation.cudagraphMode": "PIECEWISE",
                "compilation.compilationConfig": {"splitting_ops": []},
            },
            "NONE",
            "NONE",
        ),
        ({"vllm.release": "0.14.0", "compilation.compilationConfig": {"splitting_ops": []}}, "FULL", "FULL"),
        (
            {
                "vllm.release": "0.14.0",
                "compilation.compilationConfig": {"splitting_ops": ["vllm::unified_attention_with_output"]},
            },
            "FULL_AND_PIECEWISE",
            "FULL",
        ),
        ({"vllm.release": "0.14.0", "compilation.compilationConfig": {"mode": "NONE"}}, "NONE", "NONE"),
        (
            {"vllm.release": "0.14.0", "compilation.compilationConfig": {"level": 2}},
            "NONE",
            "NONE",
        ),  # 0.12-0.19 read level as mode
        (
            {
                "vllm.release": "0.14.0",
                "compilation.cudagraphMode": "FULL_DECODE_ONLY",
                "compilation.compilationConfig": {"mode": 0},
            },
            "FULL_DECODE_ONLY",
            "FULL_DECODE_ONLY",
        ),
        (
            {"vllm.release": "0.30.0", "compilation.compilationConfig": {"mode": 0}},
            "FULL_DECODE_ONLY",
            "FULL_DECODE_ONLY",
        ),
        (
            {
                "vllm.release": "0.30.0",
                "compilation.cudagraphMode": "PIECEWISE",
                "compilation.compilationConfig": {"mode": 1},
            },
            "NONE",
            "NONE",
        ),
        (
            {"vllm.release": "0.14.0", "compilation.compilationConfig": {"pass_config": {"fuse_attn_quant": True}}},
            "FULL",
            "FULL",
        ),
        (
            {
                "vllm.release": "0.14.0",
                "compilation.compilationConfig": {
                    "pass_config": {"fuse_attn_quant": True},
                    "use_inductor_graph_partition": True,
                },
            },
            "FULL_AND_PIECEWISE",
            "FULL_AND_PIECEWISE",
        ),
    ],
)
def test_effective_mode_per_release(values: dict[str, Any], config: str, mode: str) -> None:
    eff = effective(values)
    assert (eff["configMode"], eff["mode"]) == (config, mode), eff
    assert bool(eff["modeChanges"]) == (mode != eff["requestedMode"] or config != eff["requestedMode"])
    args = container(pod_spec(render(values)), "health")["args"]
    assert arg_value(args, "--expected-mode") == config  # the sidecar expects what vLLM's config line will say


def test_effective_settings_hold_every_input_of_a_later_guard() -> None:
    spec = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 4}
    eff = effective(
        {
            "vllm.release": "0.20.0",
            "attentionBackend": "ROCM_AITER_FA",
            "kvCacheDtype": "fp8",
            "maxNumSeqs": 64,
            "speculativeConfig": spec,
            "compilation.captureSizes": [1, 2, 4],
            "compilation.compilationConfig": {"max_cudagraph_capture_size": 4, "mode": 3},
            "aiter.mha": False,
        }
    )
    assert eff["aiterFA"] is True and eff["attentionBackend"] == "ROCM_AITER_FA"
    assert eff["aiter"] == {"enabled": True, "mha": False}
    assert (eff["kvCacheDtype"], eff["maxNumSeqs"], eff["speculative"], eff["numSpeculativeTokens"]) == (
        "fp8",
        64,
        True,
        3,
    )
    assert (eff["captureSizes"], eff["maxCaptureSize"], eff["compileMode"], eff["compileModeKey"]) == (
        [1, 2, 4],
        4,
        3,
        "mode",
    )
    assert eff["compilationConfig"] == {
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "cudagraph_capture_sizes": [1, 2, 4],
        "max_cudagraph_capture_size": 4,
        "mode": 3,
    }
    assert eff["releasePatch"] == "0.20.0" and eff["tensorParallelSize"] == 1 and eff["eager"] is False
    # Auto-selection: AITER FA on < 0.20 with aiter.enabled + aiter.mha, never on 0.20+.
    assert effective({"vllm.release": "0.14.0"})["aiterFA"] is True
    assert effective({"vllm.release": "0.20.0"})["aiterFA"] is False


def test_refusals_are_all_listed_at_once() -> None:
    lines = refusals(
        {
            "extraArgs": ["--enforce-eager", "--enable-prefix-caching", "-O3"],
            "extraEnv": [{"name": "HF_HUB_OFFLINE", "value": "1"}, {"name": "VLLM_ROCM_USE_AITER", "value": "0"}],
            "compilation.compilationConfig": {"full_cuda_graph": True},
        }
    )
    assert [line.split(" ", 1)[0] for line in lines] == [
        "compilation.compilationConfig.full_cuda_graph:",
        "extraArgs[0]",
        "extraArgs[2]",
        "extraEnv[1]",
    ]


# --- one node's GPUs and /dev/shm ---------------------------------------------------------------------------------


def test_tensor_parallel_above_one_node_is_refused() -> None:
    err = render_error({"tensorParallelSize": 16})
    assert "tensorParallelSize=16 is more than gpusPerNode=8" in err and "multiNode.enabled=true" in err
    err = render_error({"tensorParallelSize": 16, "multiNode.enabled": True})
    assert "must fit in one node" in err and "multiNode.nodes" in err
    err = render_error({"tensorParallelSize": 8, "gpusPerNode": 4})
    assert "tensorParallelSize=8 is more than gpusPerNode=4" in err
    # A 16-GPU node: allowed (with room for /dev/shm under the memory limit).
    docs = render({"tensorParallelSize": 16, "gpusPerNode": 16, "resources.limits.memory": "128Gi"})
    assert container(pod_spec(docs), "vllm")["resources"]["limits"]["amd.com/gpu"] == 16
    assert render({"tensorParallelSize": 8, "multiNode.enabled": True, "multiNode.nodes": 2})


@pytest.mark.parametrize("value,path", [(0, "/gpusPerNode"), ("8", "/gpusPerNode"), (128, "/gpusPerNode")])
def test_gpus_per_node_schema(value: Any, path: str) -> None:
    assert path in render_error({"gpusPerNode": value})


@pytest.mark.parametrize(
    "values,refused",
    [
        # The formula: 4 * TP + 2 GiB against the vLLM container's limit.
        ({"tensorParallelSize": 8, "resources.limits.memory": "32Gi"}, True),  # 34Gi >= 32Gi
        ({"tensorParallelSize": 8, "resources.limits.memory": "34Gi"}, True),  # equal: nothing left for vLLM
        ({"tensorParallelSize": 8, "resources.limits.memory": "35Gi"}, False),
        ({"tensorParallelSize": 8, "resources.limits.memory": "37000M"}, False),  # 37e9 bytes > 34 GiB (36.5e9)
        ({"tensorParallelSize": 8, "resources.limits.memory": "36G"}, True),  # 36e9 bytes < 34 GiB
        ({"tensorParallelSize": 8, "resources.limits.memory": 34 * 2**30 + 1}, False),  # plain bytes
        ({"tensorParallelSize": 8, "resources.limits.memory": "34816Mi"}, True),  # exactly 34Gi
        ({"tensorParallelSize": 8, "resources": {"requests": {"cpu": "1"}}}, False),  # no limit: nothing to compare
        # An explicit size.
        ({"shm.sizeLimit": "80Gi"}, True),  # default limit 64Gi
        ({"shm.sizeLimit": "64Gi"}, True),
        ({"shm.sizeLimit": "63Gi"}, False),
        ({"shm.sizeLimit": "65537Mi"}, True),
        ({"shm.sizeLimit": "65535Mi"}, False),
        ({"shm.sizeLimit": "16Gi", "resources.limits.memory": "16384Mi"}, True),
    ],
)
def test_shm_stays_under_the_memory_limit(values: dict[str, Any], refused: bool) -> None:
    if refused:
        assert "is not smaller than the vLLM container's memory limit" in render_error(values)
    else:
        assert render(values)


def test_shm_message_and_unreadable_limit() -> None:
    err = render_error({"tensorParallelSize": 8, "resources.limits.memory": "32Gi"})
    assert "/dev/shm of 34Gi (shm.perGpuGi * tensorParallelSize + shm.baseGi = 4 * 8 + 2 Gi)" in err
    assert "resources.limits.memory=32Gi" in err
    assert "/dev/shm of 80Gi (shm.sizeLimit)" in render_error({"shm.sizeLimit": "80Gi"})
    assert "not a Kubernetes quantity the chart can read" in render_error({"resources.limits.memory": "lots"})


# --- the real parser ------------------------------------------------------------------------------------------------

PARSE = r"""
import json, sys
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
import vllm

def parsed(args):
    p = FlexibleArgumentParser(prog="vllm")
    ServeSubcommand().subparser_init(p.add_subparsers(dest="subparser"))
    try:
        ns = p.parse_args(["serve", *args])
    except SystemExit:
        return None
    return {k: repr(v) for k, v in vars(ns).items() if k not in ("dispatch_function", "config")}

out = {}
for row, (base, extra) in json.loads(sys.stdin.read()).items():
    want, got = parsed(base), parsed(base + extra)
    out[row] = None if want is None or got is None else sorted(k for k in got if got[k] != want.get(k))
print(json.dumps({"version": vllm.__version__, "rows": out}))
"""


@pytest.mark.integration
def test_bypass_table_reaches_the_real_parser(tmp_path: Path, vllm_python: Path) -> None:
    """Every `real` argument row of the bypass table, appended to the command line the chart renders for the same
    values, changes what the real vLLM parser (the CPU venv's release) hands to the engine: no row is a spelling
    vLLM would not take. The chart refuses each row for that very release."""
    python = vllm_python
    version = vllm_parser.version(python)
    config = tmp_path / "vllm.yaml"
    config.write_text("enforce-eager: true\n")
    rows: dict[str, tuple[list[str], list[str]]] = {}
    bases: dict[str, list[str]] = {}
    for name, values, _, real in BYPASSES:
        if not real:
            continue
        assert "vllm.release" not in values, f"{name}: a real row is for the venv's release"
        typed = {k: v for k, v in values.items() if k not in ("extraArgs", "vllm.command")}
        key = json.dumps(typed, sort_keys=True)
        if key not in bases:
            bases[key] = container(pod_spec(render({**typed, "vllm.release": version})), "vllm")["args"]
        extra = values.get("extraArgs") or values["vllm.command"][2:]
        rows[name] = (bases[key], [str(config) if a == "/models/vllm.yaml" else a for a in extra])
        assert refusals({**values, "vllm.release": version}), name
    proc = subprocess.run(
        [str(python), "-c", PARSE],
        input=json.dumps(rows),
        capture_output=True,
        text=True,
        timeout=240,
        env={
            "PATH": "/usr/bin:/bin",
            "VLLM_NO_USAGE_STATS": "1",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "HOME": str(tmp_path),
        },
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["version"] == version
    assert set(result["rows"]) == set(rows) and len(rows) >= 30, result
    inert = {row: changed for row, changed in result["rows"].items() if not changed}
    assert not inert, f"vLLM {version} rejects these rows (None) or ignores them ([]): {inert}"
    assert "enforce_eager" in result["rows"]["config-file"]


@pytest.mark.integration
def test_torch_compile_switches_are_refused(vllm_python: Path) -> None:
    """The environment variables with which the venv's torch turns dynamo off or swaps its compile backend
    (torch/_dynamo/config.py): the chart refuses each."""
    python = vllm_python
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout.strip()
    text = (Path(site) / "torch" / "_dynamo" / "config.py").read_text()
    names = set(re.findall(r'^disable\s*=\s*os\.environ\.get\("([A-Z_]+)"', text, flags=re.M))
    names |= set(re.findall(r'os\.environ\.get\("(TORCH_COMPILE_OVERRIDE_BACKENDS)"', text))
    assert names == {"TORCH_COMPILE_DISABLE", "TORCH_COMPILE_OVERRIDE_BACKENDS"}, names
    lines = refusals({"extraEnv": [{"name": n, "value": "1"} for n in sorted(names)]})
    assert len(lines) == len(names), lines
