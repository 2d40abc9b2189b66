"""The sidecar judges known-issues/known-issues.json from the log: facts parsed, issues active / possible /
mitigated exactly as the shared evaluator says, exported as vllm_known_issue_active{id,symptom,verified}."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from vllm_rocm_health import logparse as lp
from vllm_rocm_health.known_issues import KnownIssueJudge
from vllm_rocm_health.metrics import SidecarStatus, make_registry
from vllm_rocm_health.state import LogState
from vllm_rocm_known_issues import evaluator as ki

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "health" / "fixtures"
DATA = ki.load(REPO / "known-issues" / "known-issues.json")


def state_of(name: str, replace: dict[str, str] | None = None) -> LogState:
    st = LogState()
    for line in (FIXTURES / name).read_text().splitlines():
        for old, new in (replace or {}).items():
            line = line.replace(old, new)
        st.feed(line)
    return st


def active(judge: KnownIssueJudge, st: LogState) -> set[str]:
    verdict = judge.judge(st)
    assert verdict.ok, verdict.reason
    return {m.issue.id for m in verdict.matches if m.active}


def test_facts_parsed_from_the_real_templates() -> None:
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log")
    e = st.engine
    assert (e.version, e.attention_backend, e.effective) == ("0.10.2", "ROCM_AITER_FA", "FULL")
    assert (e.quantization, e.kv_cache_dtype, e.speculative_method) == ("fp8", "fp8", "none")
    assert (e.tensor_parallel_size, e.max_num_seqs) == (8, 128)
    assert st.image_facts["rocm"] == "7.0.0" and st.image_facts["env"] == {"VLLM_ROCM_USE_AITER": "1"}
    st = state_of("v0.33.0-triton-attn-default.log")
    e = st.engine
    assert (e.attention_backend, e.quantization, e.max_num_seqs) == ("TRITON_ATTN", "none", None)


P = "(EngineCore_DP0 pid=412) INFO 12-02 11:00:02 "  # vLLM's own prefix: only such lines are events


@pytest.mark.parametrize(
    "line, backend",
    [
        (P + "[rocm.py:241] Using Flash Attention backend on V1 engine.", "ROCM_AITER_FA"),  # <=0.11
        (P + "[rocm.py:245] Using Triton Attention backend on V1 engine.", "TRITON_ATTN"),
        (P + "[rocm.py:248] Using Rocm/Aiter Attention backend on V1 engine.", "ROCM_ATTN"),  # 0.11
        (P + "[rocm.py:253] Using Aiter Flash Attention backend.", "ROCM_AITER_FA"),  # 0.14
        (P + "[rocm.py:262] Using Aiter Unified Attention backend.", "ROCM_AITER_UNIFIED_ATTN"),
        (P + "[rocm.py:200] Using AITER MLA backend on V1 engine.", "ROCM_AITER_MLA"),
        (
            P + "[rocm.py:548] Using ROCM_ATTN backend out of potential backends: ['ROCM_ATTN', 'ROCM_AITER_FA'].",
            "ROCM_ATTN",
        ),  # 0.20+
        (
            P + "[rocm.py:539] Found incompatible backend(s) [TURBOQUANT] with AttentionType.DECODER. Overriding with"
            " ROCM_ATTN out of potential backends: ['ROCM_ATTN', 'ROCM_AITER_FA', 'TRITON_ATTN'].",
            "ROCM_ATTN",
        ),
        (P + "[rocm.py:494] Using ROCM_AITER_FA backend (selected via --attention-backend).", "ROCM_AITER_FA"),
        # the encoder's, not the model's
        (P + "[rocm.py:300] Using AITER Flash Attention backend for ViT model.", None),
        (P + "[selector.py:112] Using NHD KV cache layout for FLASH_ATTN backend.", None),
    ],
)
def test_backend_lines(line: str, backend: str | None) -> None:
    events = [e for e in lp.parse_line(line) if e.kind == lp.BACKEND]
    assert [e.text for e in events] == ([backend] if backend else [])


def test_unpatched_image_hits_the_seed_and_the_fp8_issue_on_gfx950() -> None:
    judge = KnownIssueJudge(DATA, arch="gfx950")
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log")
    got = active(judge, st)
    assert {"aiter-fa-full-cudagraph-always", "aiter-fa-fp8-kv-cache-fnuz-view"} <= got
    # the sidecar's answer is the evaluator's answer for the same configuration
    assert got == {m.issue.id for m in DATA.evaluate(judge.config(st)) if m.active}
    # gfx942 uses e4m3fnuz: the FP8 view is right there
    assert "aiter-fa-fp8-kv-cache-fnuz-view" not in active(KnownIssueJudge(DATA, arch="gfx942"), st)


def test_the_distribution_image_patches_mitigate() -> None:
    patches = [
        "vllm-0.10.2/0001-rocm-aiter-fa-uniform-single-token-decode.patch",
        "vllm-0.10.2/0002-rocm-aiter-fa-fp8-kv-cache-platform-dtype.patch",
    ]
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log", {'"patches": []': f'"patches": {json.dumps(patches)}'})
    got = active(KnownIssueJudge(DATA, arch="gfx950"), st)
    assert "aiter-fa-full-cudagraph-always" not in got and "aiter-fa-fp8-kv-cache-fnuz-view" not in got


def test_unknown_arch_makes_it_possible_not_active() -> None:
    judge = KnownIssueJudge(DATA, environ={})
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log")
    verdict = judge.judge(st)
    fp8 = next(m for m in verdict.matches if m.issue.id == "aiter-fa-fp8-kv-cache-fnuz-view")
    assert fp8.status == "possible" and fp8.unknown == ["archs"] and not fp8.active
    assert "aiter-fa-full-cudagraph-always" in {m.issue.id for m in verdict.matches if m.active}


def test_eager_engine_is_judged_as_mode_none() -> None:
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log")
    st.feed("(EngineCore_DP0 pid=412) INFO 12-02 11:00:01 [config.py:3400] Cudagraph is disabled under eager mode")
    assert "aiter-fa-full-cudagraph-always" not in active(KnownIssueJudge(DATA, arch="gfx950"), st)


def test_triton_attn_default_mode_on_0_33() -> None:
    got = active(KnownIssueJudge(DATA, arch="gfx942"), state_of("v0.33.0-triton-attn-default.log"))
    # the unverified rows are reported (active metric, verified="false"), never alerted on; the TRITON_ATTN capture
    # fault is scoped to the reported models (known-issues evidence_scope) and this log's model is not one: possible;
    # the 0.19 capture hang needs TP >= 2 (an RCCL lead, issue 34) and this engine runs TP 1
    assert got == {"rocm72-hip-graph-replay-corruption"}
    assert not any(DATA.get(i).verified for i in got)


def test_restart_keeps_image_facts_and_resets_engine_facts() -> None:
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log")
    st.feed(
        "(EngineCore_DP0 pid=413) INFO 12-02 11:10:01 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with "
        "config: model='m', speculative_config=None, tensor_parallel_size=1, quantization=None, "
        'enforce_eager=False, kv_cache_dtype=auto, compilation_config={"level":3,"cudagraph_mode":1}'
    )
    assert st.restarts == 1 and st.image_facts["rocm"] == "7.0.0"
    assert st.engine.attention_backend == "" and st.engine.kv_cache_dtype == "auto"


def test_metrics_export_every_issue_and_the_active_ones() -> None:
    status = SidecarStatus(state_of("v0.10.2-image-aiter-fa-full-fp8kv.log"))
    text = generate_latest(make_registry(status, KnownIssueJudge(DATA, arch="gfx950"))).decode()
    assert "vllm_known_issues_evaluated 1.0" in text
    assert (
        'vllm_known_issue_active{id="aiter-fa-full-cudagraph-always",symptom="wrong_tokens",verified="true"} 1.0'
        in text
    )
    crash = 'vllm_known_issue_active{id="triton-attn-rocm-full-capture-fault",symptom="crash",verified="true"} 0.0'
    assert crash in text
    assert text.count("vllm_known_issue_active{") == len(DATA.issues)  # one series per row: 0 or 1


def test_missing_data_exports_not_evaluated_and_nothing_active(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv(ki.ENV_DATA, str(tmp_path / "absent.json"))
    judge = KnownIssueJudge()
    monkeypatch.undo()
    status = SidecarStatus(state_of("v0.10.2-image-aiter-fa-full-fp8kv.log"))
    text = generate_latest(make_registry(status, judge)).decode()
    assert "vllm_known_issues_evaluated 0.0" in text and "vllm_known_issue_active{" not in text
    assert "not found" in judge.error


def test_a_version_that_is_not_pep440_is_not_evaluated() -> None:
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log", {"(v0.10.2)": "(vgarbage)"})
    verdict = KnownIssueJudge(DATA).judge(st)
    assert not verdict.ok and "no readable version" in verdict.reason
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log", {"(v0.10.2)": "(v0.10.2garbage)"})
    verdict = KnownIssueJudge(DATA).judge(st)
    assert not verdict.ok and "not a PEP 440 version" in verdict.reason


def test_a_backend_the_log_does_not_show_is_inferred_with_the_charts_rules() -> None:
    """0.10.2 with VLLM_ROCM_USE_AITER=1 on gfx942 picks AITER FA (the one inference the chart and the patch tool use);
    a log without the selection line is judged on it, not left `possible`."""
    st = state_of("v0.10.2-image-aiter-fa-full-fp8kv.log", {"Using Flash Attention backend on V1 engine.": "(gone)"})
    assert st.engine.attention_backend == ""
    judge = KnownIssueJudge(DATA, arch="gfx942")
    assert judge.config(st).attention_backend == "ROCM_AITER_FA"
    assert "aiter-fa-full-cudagraph-always" in active(judge, st)


def test_the_models_architecture_from_the_log_decides_a_scoped_row() -> None:
    """A row whose evidence covers some models only (evidence_scope) is active when vLLM's own `Resolved
    architecture` line names one of them, on an arch the evidence covers; `possible` for any other model."""
    line = "(APIServer pid=301) INFO 12-02 11:00:00 [model.py:530] Resolved architecture: {}"
    base = (FIXTURES / "v0.33.0-triton-attn-default.log").read_text().splitlines()
    judge = KnownIssueJudge(DATA, arch="gfx942")
    for arch, want in (("Step3p5ForCausalLM", True), ("LlamaForCausalLM", False)):
        st = LogState()
        for x in [base[0], line.format(arch), *base[1:]]:
            st.feed(x)
        assert st.engine.architecture == arch
        assert ("triton-attn-rocm-full-capture-fault" in active(judge, st)) is want, arch
