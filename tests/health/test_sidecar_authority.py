"""The sidecar is the authority on what runs (issue 18): its verdicts come from vLLM's own log lines, bound to the
engine instance they measured.

- a canary pass belongs to one engine instance: an engine restart, a new capture, a new engine pid or a /health
  outage makes /readyz 503 until the canary passes again, and the canary runs at once instead of at its interval;
- the running cudagraph mode is compared with the one the deployment asked for (`--expected-mode`), a mode the
  qualification failed is refused, a verified unmitigated known issue keeps the pod out (unless allowed);
- client text in the log (access lines, logged prompts and stop strings) is never an engine event.

The vLLM side is the named failure injector (tests/support/injector.py) for the canary's answers and /health, and
log files written from vLLM's own templates (health/fixtures); the live tests do the same against the real vLLM CPU
server (tests/health/live/test_authority_live.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.support.canary import make_baseline
from tests.support.kfd import write_topology
from tests.support.sidecar import SidecarProcess

FIXTURES = Path(__file__).resolve().parents[2] / "health" / "fixtures"
SEED, N = 7, 6
# A long interval: every canary run these tests see was started by a new engine instance, not by the clock.
CANARY_FLAGS = [
    "--canary-seed",
    str(SEED),
    "--canary-num-problems",
    str(N),
    "--canary-idle-probe-after",
    "0",
    "--model",
    "m",
    "--canary-interval",
    "3600",
    "--canary-timeout",
    "5",
    "--health-interval",
    "0.2",
]
# vLLM 0.14, AITER FA, FULL_AND_PIECEWISE captured; no known issue applies to it.
ENGINE = (FIXTURES / "v0.14.0-dict-default.log").read_text()


def start(tmp_path: Path, answerer, log_text: str, *extra: str) -> tuple[SidecarProcess, Path]:
    _, server, path = answerer
    log = tmp_path / "vllm.log"
    log.write_text(log_text)
    sc = SidecarProcess(
        [
            "--vllm-url",
            server.url,
            "--log-source",
            f"file:{log}",
            "--canary-baseline",
            str(path),
            *CANARY_FLAGS,
            *extra,
        ],
        tmp_path / "sidecar.out",
    )
    return sc, log


def wait_code(sc: SidecarProcess, code: int, reason: str = "", timeout: float = 30.0) -> dict:
    def ok() -> bool:
        c, body = sc.ready()
        return c == code and reason in body["reason"]

    assert sc.wait_for(ok, timeout), (sc.ready(), sc.log_path.read_text()[-3000:])
    return sc.ready()[1]


def append(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


def runs(sc: SidecarProcess) -> float:
    return sc.total("vllm_canary_runs_total")


def test_a_restarted_engine_needs_its_own_canary_pass_and_gets_it_at_once(tmp_path: Path, answerer) -> None:
    sc, log = start(tmp_path, answerer, ENGINE, "--expected-mode", "FULL_AND_PIECEWISE")
    try:
        wait_code(sc, 200, "ok")
        before, instances = runs(sc), sc.total("vllm_engine_instances_total")
        # The same engine restarts behind the same log (new pid): the old pass does not vouch for it.
        append(log, ENGINE.replace("pid=412", "pid=990"))
        assert sc.total("vllm_engine_instances_total") > instances or sc.wait_for(
            lambda: sc.total("vllm_engine_instances_total") > instances, 10
        )
        # ...and it is back in service with a pass of its own, long before the 3600 s interval.
        wait_code(sc, 200, "ok")
        assert runs(sc) > before
        assert sc.total("vllm_engine_restarts_total") == 1
    finally:
        assert sc.stop() == 0


def test_a_pass_does_not_outlive_a_health_outage(tmp_path: Path, answerer) -> None:
    a, _, _ = answerer
    sc, log = start(tmp_path, answerer, ENGINE)
    try:
        wait_code(sc, 200, "ok")
        before = runs(sc)
        a.health_status = 503
        wait_code(sc, 503, "/health is failing")
        # Once /health is back, the old pass is void: Ready again only after a new run (the interval is an hour,
        # so the run that comes is the one the outage started).
        a.health_status = 200
        wait_code(sc, 200, "ok")
        assert runs(sc) > before
        assert "vLLM /health failed" in sc.log_path.read_text()
    finally:
        assert sc.stop() == 0


def test_the_mode_vllm_runs_is_checked_against_the_expected_one(tmp_path: Path, answerer) -> None:
    # The deployment asked for FULL_DECODE_ONLY, a wrapper made vLLM run its default FULL_AND_PIECEWISE.
    sc, _ = start(tmp_path, answerer, ENGINE, "--expected-mode", "FULL_DECODE_ONLY")
    try:
        body = wait_code(sc, 503, "vLLM runs cudagraph_mode FULL_AND_PIECEWISE")
        assert "the deployment asked for FULL_DECODE_ONLY" in body["reason"], body
        assert sc.total("vllm_sidecar_not_ready_reason", reason="mode_mismatch") == 1
    finally:
        assert sc.stop() == 0


def test_a_config_line_without_a_readable_mode_is_not_ready(tmp_path: Path, answerer) -> None:
    text = re.sub(r"'cudagraph_mode': <CUDAGraphMode\.\w+: [^>]*>", "'cudagraph_mode': ?", ENGINE)
    if "'cudagraph_mode': ?" not in text:  # the fixture's config line must carry the mode this test removes
        text = ENGINE.replace("compilation_config=", "compilation_config_gone=")
    sc, _ = start(tmp_path, answerer, text, "--expected-mode", "FULL_AND_PIECEWISE")
    try:
        wait_code(sc, 503, "engine config line does not read as vLLM")
    finally:
        assert sc.stop() == 0


def qualification_report(tmp_path: Path, failed: str) -> Path:
    base = json.loads(json.dumps(make_baseline(seed=SEED, num_problems=N).__dict__))
    rows = [
        {"mode": "NONE", "verdict": "pass"},
        {"mode": "FULL_AND_PIECEWISE", "verdict": "pass"},
        {"mode": failed, "verdict": "fail", "verdict_reason": "205 of 257 comparisons wrong"},
    ]
    raw = {
        "kind": "vllm-rocm-qualification",
        "format": 1,
        "vllm_version": "0.33.0",
        "served_model_name": "m",
        "recommended": "FULL_AND_PIECEWISE",
        "rows": rows,
        "baseline": base,
    }
    path = tmp_path / "report.json"
    path.write_text(json.dumps(raw))
    return path


def downgraded_to_piecewise(tmp_path: Path) -> Path:
    """FULL_AND_PIECEWISE asked for; vLLM logs a downgrade to PIECEWISE (its own fallback)."""
    lines = [x for x in ENGINE.splitlines() if "(decode, FULL)" not in x]
    at = next(i for i, x in enumerate(lines) if "Available KV cache memory" in x)
    lines.insert(
        at + 1,
        "(EngineCore_DP0 pid=412) WARNING 12-02 11:00:05 [gpu_model_runner.py:5094] "
        "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention backend "
        "AiterFlashAttentionBackend (support: AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); "
        "setting cudagraph_mode=PIECEWISE",
    )
    log = tmp_path / "vllm.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def with_report(tmp_path: Path, answerer, log: Path, report: Path) -> SidecarProcess:
    _, server, _ = answerer
    args = ["--vllm-url", server.url, "--log-source", f"file:{log}", "--qualification", str(report)]
    return SidecarProcess([*args, "--expected-mode", "FULL_AND_PIECEWISE", *CANARY_FLAGS], tmp_path / "sidecar.out")


def test_a_mode_the_qualification_failed_is_refused_even_when_vllm_chose_it(tmp_path: Path, answerer) -> None:
    sc = with_report(tmp_path, answerer, downgraded_to_piecewise(tmp_path), qualification_report(tmp_path, "PIECEWISE"))
    try:
        body = wait_code(sc, 503, "qualification report failed")
        assert sc.total("vllm_sidecar_not_ready_reason", reason="mode_failed_qualification") == 1, body
    finally:
        assert sc.stop() == 0


def test_a_mode_the_qualification_never_measured_is_refused(tmp_path: Path, answerer) -> None:
    """Issue 30: the report passed NONE and FULL_AND_PIECEWISE and failed FULL; vLLM's own fallback runs
    PIECEWISE, which it never measured. Qualified means passed: 503 naming both modes."""
    sc = with_report(tmp_path, answerer, downgraded_to_piecewise(tmp_path), qualification_report(tmp_path, "FULL"))
    try:
        body = wait_code(sc, 503, "did not pass")
        assert "cudagraph_mode PIECEWISE (asked for FULL_AND_PIECEWISE)" in body["reason"], body
        assert sc.total("vllm_sidecar_not_ready_reason", reason="mode_not_qualified") == 1, body
    finally:
        assert sc.stop() == 0


def test_facts_inside_nested_values_are_values(tmp_path: Path, answerer) -> None:
    """Issue 30: a path (or a model-shipped config) that spells `kv_cache_dtype=auto` before the real top-level
    `kv_cache_dtype=fp8` hid the verified FP8 row on gfx950 (first match); read by structure, it applies."""
    text = IMAGE_0102.replace("model='amd/Llama-3.1-70B-Instruct-FP8-KV'", "model='/m/kv_cache_dtype=auto, x'", 1)
    assert text != IMAGE_0102
    mi355 = write_topology(tmp_path / "kfd", "gfx950")
    allow = ("--allow-known-issues", "aiter-fa-full-cudagraph-always", "--expected-mode", "FULL")
    sc, _ = start(tmp_path, answerer, text, *allow, "--kfd-topology", str(mi355))
    try:
        wait_code(sc, 503, "aiter-fa-fp8-kv-cache-fnuz-view")
        assert sc.total("vllm_sidecar_not_ready_reason", reason="known_issue") == 1
    finally:
        assert sc.stop() == 0


def test_a_report_that_failed_the_expected_mode_stops_the_start(tmp_path: Path, answerer) -> None:
    _, server, _ = answerer
    log = tmp_path / "vllm.log"
    log.write_text("")
    report = qualification_report(tmp_path, "FULL")
    with pytest.raises(RuntimeError, match="cudagraph_mode FULL failed qualification"):
        SidecarProcess(
            [
                "--vllm-url",
                server.url,
                "--log-source",
                f"file:{log}",
                "--qualification",
                str(report),
                "--expected-mode",
                "FULL",
                *CANARY_FLAGS,
            ],
            tmp_path / "sidecar.out",
        )


@pytest.mark.parametrize("recommended", ["FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"])
def test_without_an_expected_mode_the_reports_recommendation_is_expected(
    tmp_path: Path, answerer, recommended: str
) -> None:
    """Compose passes the report and, unless the operator names one, no mode: vLLM then runs the report's
    recommendation (what `qualification apply` wrote), and that is what its config line must show."""
    _, server, _ = answerer
    report = json.loads(qualification_report(tmp_path, "FULL").read_text())
    report.update(vllm_version="0.14.0", recommended=recommended)
    report["rows"].append({"mode": "FULL_DECODE_ONLY", "verdict": "pass"})
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    log = tmp_path / "vllm.log"
    log.write_text(ENGINE)  # FULL_AND_PIECEWISE
    sc = SidecarProcess(
        ["--vllm-url", server.url, "--log-source", f"file:{log}", "--qualification", str(path), *CANARY_FLAGS],
        tmp_path / "sidecar.out",
    )
    try:
        if recommended == "FULL_AND_PIECEWISE":
            wait_code(sc, 200, "ok")
        else:
            body = wait_code(sc, 503, "the deployment asked for FULL_DECODE_ONLY")
            assert sc.total("vllm_sidecar_not_ready_reason", reason="mode_mismatch") == 1, body
    finally:
        assert sc.stop() == 0


MI300X, MI355X = "AMD_Instinct_MI300X_OAM", "AMD_Instinct_MI355X_OAM"


@pytest.mark.parametrize("given", ["flag", "env"])
def test_a_report_of_another_gpu_product_keeps_the_pod_out(tmp_path: Path, answerer, given: str) -> None:
    """The report measured MI300X (qualify run --gpu-product); this sidecar's pod runs on MI355X (--gpu-product, or
    VLLM_HEALTH_GPU_PRODUCT as the chart's env would set it): 503 gpu_product_not_qualified, whatever else is
    right (same release, mode and canary answers). The same product: Ready."""
    import os

    _, server, _ = answerer
    report = json.loads(qualification_report(tmp_path, "FULL").read_text())
    report.update(vllm_version="0.14.0", gpu_product=MI300X)  # the release ENGINE's log line names
    path = tmp_path / "report.json"
    path.write_text(json.dumps(report))
    log = tmp_path / "vllm.log"
    log.write_text(ENGINE)  # FULL_AND_PIECEWISE, the report's recommendation
    base = ["--vllm-url", server.url, "--log-source", f"file:{log}", "--qualification", str(path), *CANARY_FLAGS]

    def sidecar(product: str, name: str) -> SidecarProcess:
        if given == "flag":
            return SidecarProcess([*base, "--gpu-product", product], tmp_path / name)
        env = {**os.environ, "VLLM_HEALTH_GPU_PRODUCT": product}
        return SidecarProcess(base, tmp_path / name, env=env)

    sc = sidecar(MI355X, "other.out")
    try:
        body = wait_code(sc, 503, f"qualified GPU product {MI300X}, this deployment runs on {MI355X}")
        assert sc.total("vllm_sidecar_not_ready_reason", reason="gpu_product_not_qualified") == 1, body
    finally:
        assert sc.stop() == 0
    sc = sidecar(MI300X, "same.out")
    try:
        wait_code(sc, 200, "ok")
        assert sc.total("vllm_sidecar_not_ready_reason", reason="gpu_product_not_qualified") == 0
    finally:
        assert sc.stop() == 0


IMAGE_0102 = (FIXTURES / "v0.10.2-image-aiter-fa-full-fp8kv.log").read_text()


def test_a_verified_known_issue_on_the_running_engine_keeps_the_pod_out(tmp_path: Path, answerer) -> None:
    # vLLM 0.10.2, AITER FA, FULL, no patch applied (the image's facts line says so): silently wrong tokens.
    sc, _ = start(tmp_path, answerer, IMAGE_0102, "--expected-mode", "FULL")
    try:
        body = wait_code(sc, 503, "aiter-fa-full-cudagraph-always")
        assert sc.total("vllm_sidecar_not_ready_reason", reason="known_issue") == 1, body
    finally:
        assert sc.stop() == 0


def test_the_allow_list_is_the_only_way_past_a_known_issue(tmp_path: Path, answerer) -> None:
    # On an observed MI300X (gfx942): every row that depends on the architecture is decided.
    kfd = ("--kfd-topology", str(write_topology(tmp_path / "kfd", "gfx942", "gfx942")))
    sc, _ = start(tmp_path, answerer, IMAGE_0102, "--expected-mode", "FULL", *kfd)
    try:
        wait_code(sc, 503, "known issue")
        ids = re.findall(
            r'vllm_known_issue_active\{id="([a-z0-9-]+)",symptom="(?:wrong_tokens|crash)",'
            r'verified="true"\} 1\.0',
            sc.metrics(),
        )
        assert ids
    finally:
        assert sc.stop() == 0
    sc, _ = start(
        tmp_path, answerer, IMAGE_0102, "--expected-mode", "FULL", "--allow-known-issues", ",".join(ids), *kfd
    )
    try:
        wait_code(sc, 200, "ok")
    finally:
        assert sc.stop() == 0


def test_an_unknown_allowed_id_stops_the_start(tmp_path: Path, answerer) -> None:
    with pytest.raises(RuntimeError, match="not-a-row not in the known-issues data"):
        start(tmp_path, answerer, "", "--allow-known-issues", "not-a-row")


def test_without_an_accuracy_reference_it_refuses_to_start_and_the_opt_out_says_so(tmp_path: Path, answerer) -> None:
    _, server, _ = answerer
    with pytest.raises(RuntimeError, match="no accuracy reference"):
        SidecarProcess(["--vllm-url", server.url], tmp_path / "a.out")
    sc = SidecarProcess(["--vllm-url", server.url, "--no-canary-enabled"], tmp_path / "b.out")
    try:
        assert sc.value("vllm_canary_configured") == 0
        assert "wrong tokens with HTTP 200 will NOT be caught" in sc.log_path.read_text()
    finally:
        assert sc.stop() == 0


def test_an_unreadable_log_is_named_after_the_grace_not_waited_on(tmp_path: Path, answerer) -> None:
    """vLLM answers /health (the failure injector), its log has the engine line but capture lines this sidecar
    does not know (a future release's wording): 503 capture_pending during the grace, then log_format_unknown."""
    unknown = re.sub(r"Capturing CUDA graphs", "Recording device graphs", ENGINE)
    unknown = unknown.replace("Graph capturing finished", "Device graphs recorded")
    assert unknown != ENGINE
    sc, _ = start(tmp_path, answerer, unknown, "--log-grace", "2")
    try:
        body = wait_code(sc, 503, "log format of this release")
        assert "0.14.0" in body["reason"]
        assert sc.total("vllm_sidecar_not_ready_reason", reason="log_format_unknown") == 1
    finally:
        assert sc.stop() == 0


def test_capture_lines_without_the_engine_line_vouch_for_nothing(tmp_path: Path, answerer) -> None:
    """A logging configuration (or a data-parallel rank) that hides the engine config line: the capture lines alone
    once made the pod Ready with no rule on the running mode. Now: engine_config_unseen after the grace."""
    hidden = "".join(ln for ln in ENGINE.splitlines(keepends=True) if "Initializing a V1 LLM engine" not in ln)
    sc, _ = start(tmp_path, answerer, hidden, "--log-grace", "2", "--expected-mode", "FULL_AND_PIECEWISE")
    try:
        body = wait_code(sc, 503, "shows no engine config line")
        assert "VLLM_LOGGING_CONFIG_PATH" in body["reason"]
        assert sc.total("vllm_sidecar_not_ready_reason", reason="engine_config_unseen") == 1
    finally:
        assert sc.stop() == 0


def test_the_gpu_architecture_is_observed_not_assumed(tmp_path: Path, answerer) -> None:
    """The fnuz FP8 row (verified wrong tokens on gfx950) was `possible` and the pod Ready while nobody named the
    arch. Now: unknown -> gpu_arch_unknown; an observed gfx950 -> known_issue; an observed gfx942 -> Ready."""
    allow = ("--allow-known-issues", "aiter-fa-full-cudagraph-always", "--expected-mode", "FULL")
    cases = (
        (tmp_path / "no-kfd", 503, "gpu_arch_unknown", "aiter-fa-fp8-kv-cache-fnuz-view"),
        (write_topology(tmp_path / "mi355", "gfx950"), 503, "known_issue", "aiter-fa-fp8-kv-cache-fnuz-view"),
        (write_topology(tmp_path / "mi300", "gfx942"), 200, "", "ok"),
    )
    for topology, code, reason, words in cases:
        sc, _ = start(tmp_path, answerer, IMAGE_0102, *allow, "--kfd-topology", str(topology))
        try:
            wait_code(sc, code, words)
            if reason:
                assert sc.total("vllm_sidecar_not_ready_reason", reason=reason) == 1
            source = "unknown" if code == 503 and reason == "gpu_arch_unknown" else "observed"
            assert f'source="{source}"' in sc.metrics()
        finally:
            assert sc.stop() == 0
