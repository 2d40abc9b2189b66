"""qualify's pieces that need no server: the command template, the tie-aware comparison, verdicts, the
recommendation, the table, exit codes, --resume, and the report reader deployment uses."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from vllm_rocm_core.qualification import QualificationError, validate
from vllm_rocm_qualify import report as rep
from vllm_rocm_qualify import template
from vllm_rocm_qualify.cli import _exit_code
from vllm_rocm_qualify.client import Output
from vllm_rocm_qualify.compare import compare_one, compare_shape
from vllm_rocm_qualify.config import QualifyConfig
from vllm_rocm_qualify.logs import why_it_failed
from vllm_rocm_qualify.ranking import round_speeds
from vllm_rocm_qualify.runner import Qualification

H200 = Path(__file__).resolve().parents[1] / "fixtures" / "qualify" / "h200-vllm-0.26.0"


# --- the command template ------------------------------------------------------------------------------------
def test_mode_args_becomes_the_compilation_config_or_enforce_eager() -> None:
    t = "vllm serve {model} --port {port} --served-model-name {served_model_name} {mode_args}"
    argv = template.expand(t, "FULL_DECODE_ONLY", 8123, "/m", "m", "--max-num-seqs 8")
    assert argv == [
        "vllm",
        "serve",
        "/m",
        "--port",
        "8123",
        "--served-model-name",
        "m",
        "--compilation-config",
        '{"cudagraph_mode": "FULL_DECODE_ONLY"}',
        "--max-num-seqs",
        "8",
    ]
    assert template.expand(t, template.EAGER, 1, "/m", "m")[-1] == "--enforce-eager"


def test_mode_inside_a_word_and_other_braces_left_alone() -> None:
    t = """sh -c 'exec serve "$@"' {mode} --port {port} -cc '{"mode":0,"cudagraph_mode":"{mode}"}'"""
    argv = template.expand(t, "PIECEWISE", 9, "/m", "m")
    assert argv[3] == "PIECEWISE" and argv[-1] == '{"mode":0,"cudagraph_mode":"PIECEWISE"}'
    assert template.expand(t, template.EAGER, 9, "/m", "m")[3] == "NONE"


@pytest.mark.parametrize(
    "t,port,error",
    [
        ("vllm serve {model} --port {port}", 0, "never says the mode"),
        ("vllm serve {model} {mode_args}", 0, "no {port}"),
        ("vllm serve 'unbalanced {mode_args}", 0, "shell line"),
        ("", 0, "empty"),
    ],
)
def test_template_refused_before_any_server_starts(t: str, port: int, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        template.check(t, port)


def test_fixed_port_needs_no_placeholder() -> None:
    template.check("vllm serve m --port 8000 {mode_args}", 8000)


# --- the comparison ----------------------------------------------------------------------------------------
def out(tokens: list[int], lps: list[float], top: list[dict[int, float]] | None = None) -> Output:
    return Output(tokens, lps, top or [{t: lp} for t, lp in zip(tokens, lps, strict=True)])


def test_identical_answers_are_exact_with_their_logprob_drift() -> None:
    r = compare_one(out([1, 2, 3], [-0.1, -0.2, -0.3]), out([1, 2, 3], [-0.1, -0.25, -0.3]), 0.3)
    assert r["kind"] == "exact" and r["drift"] == pytest.approx(0.05)


def test_a_divergence_at_a_near_tie_is_a_tie() -> None:
    ref = out([1, 7], [-0.1, -0.70], [{1: -0.1}, {7: -0.70, 8: -0.75}])
    cand = out([1, 8], [-0.1, -0.69], [{1: -0.1}, {8: -0.69, 7: -0.72}])
    r = compare_one(ref, cand, 0.3)
    assert r["kind"] == "tie" and r["at"] == 1 and r["gap"] == pytest.approx(0.05)


def test_a_token_the_reference_ranked_far_below_is_a_disagreement() -> None:
    ref = out([5], [-0.2], [{5: -0.2, 6: -1.5}])
    cand = out([6], [-0.3], [{6: -0.3, 5: -0.4}])
    r = compare_one(ref, cand, 0.3)
    assert r["kind"] == "disagree" and r["gap"] == pytest.approx(1.3)


def test_a_token_outside_the_reference_top_k_is_a_disagreement() -> None:
    r = compare_one(out([5], [-0.2], [{5: -0.2, 6: -0.3}]), out([9], [-0.1], [{9: -0.1, 5: -0.15}]), 0.3)
    assert r["kind"] == "disagree" and math.isinf(r["gap"])


def test_different_lengths_without_a_divergence_disagree() -> None:
    assert compare_one(out([1, 2], [-0.1, -0.1]), out([1], [-0.1]), 0.3)["kind"] == "disagree"


def test_shape_counts_outcomes_and_fails_on_drift_disagreement_or_errors() -> None:
    same = out([1, 2], [-0.1, -0.2])
    assert compare_shape([same, same], [same, same], 0.3) == {
        "requests": 2,
        "exact": 2,
        "tie": 0,
        "disagree": 0,
        "error": 0,
        "max_drift": 0.0,
        "ok": True,
    }
    drifted = compare_shape([same], [out([1, 2], [-0.1, -0.9])], 0.3)
    assert not drifted["ok"] and "drift 0.700" in drifted["why"]
    wrong = compare_shape([same], [out([3, 2], [-0.1, -0.2])], 0.3)
    assert not wrong["ok"] and wrong["disagree"] == 1 and wrong["worst"]["gap"] is None  # infinite -> null
    failed = compare_shape([same], [Output(error="HTTP 500")], 0.3)
    assert not failed["ok"] and failed["error"] == 1 and "HTTP 500" in failed["why"]
    assert not compare_shape([same], [], 0.3)["ok"]


# --- verdicts, recommendation, report ----------------------------------------------------------------------
def row(mode: str, tok_s: tuple[float, ...] = (100.0, 1000.0), **kw) -> dict:
    r = {
        "mode": mode,
        "label": mode,
        "role": "candidate",
        "status": "ok",
        "agreement": {"single": {"ok": True, "requests": 3, "exact": 3, "tie": 0}},
        "canary": {"outcome": "pass", "reason": "", "score": 1.0, "drift": 0.0},
        "throughput": {str(c): {"tok_s": t} for c, t in zip((1, 16), tok_s, strict=True)},
    }
    r.update(kw)
    return r


@pytest.mark.parametrize(
    "changes,verdict,why",
    [
        ({}, "pass", ""),
        ({"status": "start_failed", "reason": "exited with code 1: ValueError: x"}, "error", "ValueError"),
        ({"agreement": {"mixed": {"ok": False, "disagree": 3, "why": "3/8 answers differ"}}}, "fail", "mixed"),
        (
            {"agreement": {"mixed": {"ok": False, "disagree": 0, "why": "logprobs of agreeing tokens drift 1.0"}}},
            "fail",
            "drift",
        ),
        (
            {"agreement": {"mixed": {"ok": False, "disagree": 0, "error": 2, "why": "2 requests failed"}}},
            "error",
            "failed",
        ),
        ({"canary": {"outcome": "fail", "reason": "score 0.1 < 0.6"}}, "fail", "canary"),
        ({"canary": {"outcome": "error", "reason": "timeout"}}, "error", "canary"),
        ({"throughput": {}}, "error", "no throughput"),
        ({"throughput": {"1": {"tok_s": 5.0, "failed": 2}}}, "error", "2 requests failed"),
    ],
)
def test_verdict(changes: dict, verdict: str, why: str) -> None:
    v, reason = rep.verdict(row("PIECEWISE", **changes))
    assert v == verdict and why in reason


def test_recommendation_is_the_fastest_mode_that_passed() -> None:
    rows = [
        row("NONE", (10, 100), role="reference"),
        row("PIECEWISE", (20, 300)),
        row("FULL", (60, 900)),
        row("FULL_DECODE_ONLY", (50, 1000), canary={"outcome": "fail", "reason": "x"}),
    ]
    report = rep.finish({**rep.new({}), "rows": rows}, rank_by=0)
    assert report["recommended"] == "FULL"  # FULL_DECODE_ONLY is faster at 16 but failed
    assert rep.finish({**rep.new({}), "rows": rows}, rank_by=16)["recommended"] == "FULL"
    assert round_speeds(rows[1], 0) == [pytest.approx(math.sqrt(20 * 300))]
    none_passed = rep.finish({**rep.new({}), "rows": [row("FULL", status="start_failed", reason="x")]}, 0)
    assert none_passed["recommended"] is None and "no mode passed" in rep.table(none_passed)


def test_report_file_has_no_infinity_and_reads_back(tmp_path: Path) -> None:
    report = rep.finish(
        {
            **rep.new({"served_model_name": "m", "vllm_version": "0.32.0"}),
            "rows": [row("NONE", canary={"outcome": "pass", "reason": "", "score": 1.0, "drift": math.inf})],
        },
        0,
    )
    rep.save(report, tmp_path / "r.json")
    raw = json.loads((tmp_path / "r.json").read_text())
    assert raw["rows"][0]["canary"]["drift"] is None
    assert validate(raw).choose_mode() == "NONE"


def test_table_lists_every_row_with_downgrades_and_reasons() -> None:
    rows = [
        row("NONE", role="reference"),
        row("FULL", effective_mode="NONE", downgraded=True, downgrade_reason="config override"),
        row("PIECEWISE", agreement={"first": {"ok": False, "disagree": 1, "why": "1/1 answers differ"}}),
    ]
    text = rep.table(rep.finish({**rep.new({}), "rows": rows}, 0))
    assert "NONE (ref)" in text and "NONE (downgraded)" in text and "FAIL in first" in text
    assert "FULL: ran as NONE (config override)" in text and "PIECEWISE: fail: first: 1/1" in text
    assert "recommended: FULL" in text or "recommended: NONE" in text


def test_exit_code_follows_the_required_mode() -> None:
    report = rep.finish(
        {**rep.new({}), "rows": [row("NONE"), row("FULL", canary={"outcome": "fail", "reason": "x"})]}, 0
    )
    assert _exit_code(report, []) == 0
    assert _exit_code(report, ["NONE"]) == 0
    assert _exit_code(report, ["FULL"]) == 1
    assert _exit_code(report, ["PIECEWISE"]) == 1  # not qualified at all


# --- the report reader deployment uses ---------------------------------------------------------------------
@pytest.mark.parametrize(
    "mutate,error",
    [
        (lambda r: r.update(kind="other"), "not a qualification report"),
        (lambda r: r.update(rows=[]), "no rows"),
        (lambda r: r["rows"].append(dict(r["rows"][0])), "appears twice"),
        (lambda r: r["rows"][0].update(verdict="maybe"), "needs a mode"),
        (lambda r: r.update(recommended="FULL"), "not a passing row"),
        (lambda r: r.update(baseline={"answers": 3}), "not a canary baseline"),
        (lambda r: r.update(gpu_product=""), "gpu_product '' is not a GPU product name"),
        (lambda r: r.update(gpu_product="  "), "is not a GPU product name"),
        (lambda r: r.update(gpu_product=["AMD_Instinct_MI300X_OAM"]), "is not a GPU product name"),
        (lambda r: r.update(gpu_product=None), "gpu_product 'None' is not a GPU product name"),
    ],
)
def test_malformed_reports_are_refused(mutate, error: str) -> None:
    raw = json.loads((H200 / "report.json").read_text())
    mutate(raw)
    with pytest.raises(QualificationError, match=error):
        validate(raw)


def test_choose_mode() -> None:
    report = validate(json.loads((H200 / "report.json").read_text()))
    assert report.choose_mode() == "FULL_DECODE_ONLY"
    assert report.choose_mode("PIECEWISE") == "PIECEWISE"
    with pytest.raises(QualificationError, match="FULL failed qualification: first: 1/1 answers differ"):
        report.choose_mode("FULL")
    with pytest.raises(QualificationError, match="not a cudagraph_mode"):
        report.choose_mode("FAST")
    report.check_served_model("smollm2-135m-instruct")
    with pytest.raises(QualificationError, match="qualify this model"):
        report.check_served_model("meta-llama/Llama-3.1-8B-Instruct")


MI300X, MI355X = "AMD_Instinct_MI300X_OAM", "AMD_Instinct_MI355X_OAM"


def test_check_gpu_product() -> None:
    """A report belongs to the GPU product it measured: another product, or a product on one side only, is refused
    with a sentence saying which; neither side naming one is today's reports and deployments, accepted."""
    raw = json.loads((H200 / "report.json").read_text())
    untagged = validate(raw)
    assert untagged.gpu_product == ""
    untagged.check_gpu_product("")
    with pytest.raises(QualificationError) as e:
        untagged.check_gpu_product(MI300X)
    assert str(e.value) == (
        f"the report does not say which GPU product it measured; qualify with --gpu-product {MI300X}"
    )
    tagged = validate({**raw, "gpu_product": MI300X})
    assert tagged.gpu_product == MI300X
    tagged.check_gpu_product(MI300X)
    with pytest.raises(QualificationError) as e:
        tagged.check_gpu_product(MI355X)
    assert str(e.value) == (
        f"the report qualified GPU product {MI300X}, this deployment runs on {MI355X}: qualify on this GPU product"
    )
    with pytest.raises(QualificationError) as e:
        tagged.check_gpu_product("")
    assert str(e.value) == (
        f"the report qualified GPU product {MI300X}; this deployment's product is not known: give --gpu-product"
    )


@pytest.mark.parametrize("name", ["", " MI300X", "AMD Instinct MI300X", "MI300X_", "x" * 64, "MI300X\n"])
def test_a_gpu_product_no_node_label_can_carry_is_refused(name: str) -> None:
    from vllm_rocm_core.qualification import gpu_product_name

    with pytest.raises(QualificationError, match="not a GPU product name as the node label"):
        gpu_product_name(name)
    assert gpu_product_name(MI300X) == MI300X and gpu_product_name("x" * 63) == "x" * 63


# --- settings, --resume, CLI -------------------------------------------------------------------------------
def test_default_single_lengths_are_vllms_capture_sizes() -> None:
    # The capture sizes the H200 server printed for --max-num-seqs 128: one request per bucket.
    captured = json.loads((H200 / "report.json").read_text())["rows"][1]["capture_sizes"]
    assert QualifyConfig(max_capture_size=256).lengths(2048) == sorted(captured)
    assert len(QualifyConfig().lengths(4096)) == 51  # vLLM's 512 cap
    assert QualifyConfig(single_lengths=[4, 5000]).lengths(2048) == [4]


@pytest.mark.parametrize(
    "kw,error",
    [
        ({"modes": ["FAST"]}, "choose from"),
        ({"modes": ["FULL", "FULL"]}, "twice"),
        ({"require": ["FULL"], "modes": ["NONE"]}, "not among"),
        ({"concurrency": [0]}, "at least 1"),
        ({"rank_by": 64}, "not one of"),
        ({"env": ["NOEQUALS"]}, "KEY=VALUE"),
        ({"tolerance": 0.0}, "positive"),
        ({"rounds": 0}, "--rounds must be at least 1"),
        ({"tie_margin": 1.0}, "--tie-margin is a fraction"),
        ({"parallel": -1}, "--parallel must not be negative"),
        ({"kv_cache_bytes": -1}, "--kv-cache-bytes must not be negative"),
        ({"gpus": ["0", "0"]}, "--gpus names a GPU twice"),
        ({"gpu_product": "AMD Instinct MI300X"}, "--gpu-product 'AMD Instinct MI300X': not a GPU product name"),
    ],
)
def test_bad_settings_are_refused(kw: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        QualifyConfig(**kw).validate()


def test_quick_sets_only_what_was_not_given() -> None:
    cfg = QualifyConfig(quick=True, concurrency=[1, 2, 8])
    cfg.validate()
    assert cfg.concurrency == [1, 2, 8] and cfg.rounds == 2 and cfg.gen_tokens == 16


def test_one_fixed_port_cannot_serve_servers_side_by_side(tmp_path: Path) -> None:
    kw = {"model": "m", "command": "vllm serve m --port 8000 {mode_args}", "port": 8000, "workdir": tmp_path}
    with pytest.raises(ValueError, match="--port gives every server the same port"):
        Qualification(QualifyConfig(**kw), print)
    Qualification(QualifyConfig(**kw, parallel=1), print)
    Qualification(QualifyConfig(**kw, modes=["NONE"]), print)


def test_gpu_ids_keep_their_case_and_modes_are_upper_cased() -> None:
    from vllm_rocm_qualify.cli import build_parser

    args = build_parser().parse_args(["run", "--gpus", "GPU-5a8b,1", "--modes", "none,full"])
    assert args.gpus == ["GPU-5a8b", "1"] and args.modes == ["NONE", "FULL"]


def _workdir_from_h200(tmp_path: Path) -> QualifyConfig:
    report = json.loads((H200 / "report.json").read_text())
    (tmp_path / "reference.json").write_text(json.dumps({"shapes": {}, "tp_prompt": [1]}))
    (tmp_path / "baseline.json").write_text(json.dumps(report["baseline"]))
    (tmp_path / "report.json").write_text(json.dumps(report))
    return QualifyConfig(
        **{k: report[k] for k in ("model", "served_model_name", "command", "server_args", "reference")},
        workdir=tmp_path,
        resume=True,
    )


def test_resume_keeps_finished_modes_and_starts_nothing(tmp_path: Path) -> None:
    said: list[str] = []
    report = Qualification(_workdir_from_h200(tmp_path), said.append).run()
    assert [r["mode"] for r in report["rows"]] == [
        "NONE",
        "PIECEWISE",
        "FULL_DECODE_ONLY",
        "FULL_AND_PIECEWISE",
        "FULL",
    ]
    assert report["recommended"] == "FULL_DECODE_ONLY"
    assert not any("starting" in s for s in said) and sum("kept from the earlier run" in s for s in said) == 5


def test_resume_refuses_another_runs_report(tmp_path: Path) -> None:
    cfg = _workdir_from_h200(tmp_path)
    cfg.server_args = "--max-num-seqs 64"
    with pytest.raises(ValueError, match="other settings"):
        Qualification(cfg, lambda _: None).run()


def test_the_gpu_product_is_recorded_only_when_given_and_resume_keeps_it(tmp_path: Path) -> None:
    """`--gpu-product` goes into the report as top-level gpu_product (what deployment matches against the node's
    amd.com/gpu.product-name); without it the key is absent, as in every report before it. --resume refuses a
    report of another product (or of none), like any other setting of the run."""
    report = Qualification(_workdir_from_h200(tmp_path), lambda _: None).run()
    assert "gpu_product" not in report and "gpu_product" not in report["settings"]

    cfg = _workdir_from_h200(tmp_path)
    cfg.gpu_product = "AMD_Instinct_MI300X_OAM"
    with pytest.raises(ValueError, match="gpu_product must match"):  # the earlier run named no product
        Qualification(cfg, lambda _: None).run()

    saved = json.loads((tmp_path / "report.json").read_text())
    (tmp_path / "report.json").write_text(json.dumps({**saved, "gpu_product": "AMD_Instinct_MI300X_OAM"}))
    report = Qualification(cfg, lambda _: None).run()
    assert report["gpu_product"] == "AMD_Instinct_MI300X_OAM" and report["recommended"] == "FULL_DECODE_ONLY"
    assert validate(report).gpu_product == "AMD_Instinct_MI300X_OAM"
    res = cli("show", str(tmp_path / "report.json"))
    assert res.returncode == 0 and "measured on GPU product: AMD_Instinct_MI300X_OAM" in res.stdout
    assert "GPU product" not in cli("show", str(H200 / "report.json")).stdout

    cfg.gpu_product = "AMD_Instinct_MI355X_OAM"
    with pytest.raises(ValueError, match="gpu_product must match"):
        Qualification(cfg, lambda _: None).run()


def test_run_takes_the_gpu_product_flag() -> None:
    from vllm_rocm_qualify.cli import build_parser

    args = build_parser().parse_args(["run", "--gpu-product", "AMD_Instinct_MI300X_OAM"])
    assert args.gpu_product == "AMD_Instinct_MI300X_OAM"
    assert "amd.com/gpu.product-name" in cli("run", "--help").stdout


def test_why_it_failed_names_the_error_line() -> None:
    tail = "INFO starting\nTraceback (most recent call last):\n  File x\nValueError: bad cudagraph_mode\nshutdown\n"
    assert why_it_failed(tail) == "ValueError: bad cudagraph_mode"
    assert why_it_failed("") == "no output"


def cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "vllm_rocm_qualify", *args], capture_output=True, text=True, timeout=60
    )


def test_help_explains_itself() -> None:
    res = cli("run", "--help")
    assert res.returncode == 0
    for words in ("fastest", "{mode_args}", "--require", "Exit status", "--resume", "canary", "side by side", "{gpu}"):
        assert words in res.stdout


def test_bad_arguments_exit_2_before_any_server(tmp_path: Path) -> None:
    res = cli("run", "--modes", "NONE,FAST", "--workdir", str(tmp_path))
    assert res.returncode == 2 and "choose from" in res.stderr
    res = cli("run", "--command", "vllm serve m", "--workdir", str(tmp_path))
    assert res.returncode == 2 and "never says the mode" in res.stderr
    assert not (tmp_path / "logs").exists()


def test_show_prints_the_table_and_applies_require() -> None:
    res = cli("show", str(H200 / "report.json"), "--require", "FULL_DECODE_ONLY")
    assert res.returncode == 0 and "recommended: FULL_DECODE_ONLY" in res.stdout
    res = cli("show", str(H200 / "report.json"), "--require", "FULL")
    assert res.returncode == 1 and "required mode FULL did not pass" in res.stderr


def test_operator_command_dispatches_and_explains_itself() -> None:
    """`vllm-rocm` is one command for operators: each subcommand is its part's own CLI."""
    vr = [sys.executable, "-m", "vllm_rocm_qualify.command"]
    res = subprocess.run([*vr, "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    for words in ("qualify run", "qualification apply", "patches", "known-issues"):
        assert words in res.stdout
    res = subprocess.run([*vr, "qualfy"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "unknown command 'qualfy'" in res.stderr
    res = subprocess.run(
        [*vr, "qualify", "show", str(H200 / "report.json")], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0 and "recommended: FULL_DECODE_ONLY" in res.stdout
    res = subprocess.run(
        [
            *vr,
            "known-issues",
            "--release",
            "0.10.2",
            "--backend",
            "ROCM_AITER_FA",
            "--mode",
            "FULL",
            "--arch",
            "gfx942",
            "--env",
            "",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 1 and "aiter-fa-full-cudagraph-always" in res.stdout


def test_old_names_still_work_with_a_deprecation_message() -> None:
    res = subprocess.run(
        [sys.executable, "-m", "vllm_rocm_stack", "qualify", "show", str(H200 / "report.json")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "recommended: FULL_DECODE_ONLY" in res.stdout
    assert "deprecated, use `vllm-rocm qualify`" in res.stderr
    res = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from vllm_rocm_patches.cli import deprecated_main; "
            "sys.argv = ['vllm-rocm-patches', 'list']; sys.exit(deprecated_main())",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0 and "vllm 0.10.2" in res.stdout
    assert "deprecated, use `vllm-rocm patches" in res.stderr


def test_installed_defaults_make_sense_outside_the_repository() -> None:
    """An installed `vllm-rocm qualify` knows nothing of this checkout: vLLM from PATH, a work directory where it
    runs, and no model of its own (asked for, before any server starts)."""
    cfg = QualifyConfig()
    assert cfg.command.startswith("vllm serve {model}") and cfg.workdir == Path("vllm-rocm-qualify")
    assert ".work" not in repr(cfg)
    res = cli("run", "--workdir", "/nonexistent/never-created")
    assert res.returncode == 2 and "--model" in res.stderr
    assert not Path("/nonexistent/never-created").exists()


def test_one_writer_of_the_mode_flag() -> None:
    """qualify's servers and the compose gate's vllm.yaml tell vLLM the mode the same way; a non-mode is refused."""
    from vllm_rocm_core.qualification import compilation_config

    assert template.mode_args("FULL") == ["--compilation-config", compilation_config("FULL")]
    assert json.loads(compilation_config("FULL_DECODE_ONLY")) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    with pytest.raises(QualificationError, match="not a cudagraph mode"):
        compilation_config("full")
