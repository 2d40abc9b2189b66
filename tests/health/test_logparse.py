"""The parser and state machine on recorded-from-template log excerpts of each release (health/fixtures/)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from vllm_rocm_health import logline
from vllm_rocm_health import logparse as lp
from vllm_rocm_health.state import LogState

FIXTURES = Path(__file__).resolve().parents[2] / "health" / "fixtures"
REAL_H200 = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "qualify" / "h200-vllm-0.26.0"


def summarise(name: str, hint: str = "") -> dict:
    state = LogState(requested_hint=hint)
    for line in (FIXTURES / name).read_text().splitlines():
        state.feed(line)
    return state.summary()


# file, requested, effective, downgraded, finished, graphs, failures, eager, restarts
CASES = [
    ("v0.10.2-full-honoured.log", "FULL", "FULL", False, True, {"mixed/FULL": 67}, [], False, 0),
    (
        "v0.11.0-downgrade-full.log",
        "FULL",
        "FULL_AND_PIECEWISE",
        True,
        True,
        {"mixed/PIECEWISE": 67, "decode/FULL": 35},
        [],
        False,
        0,
    ),
    ("v0.10.1.1-full-never.log", "FULL", "FULL", False, False, {}, ["engine_failed", "exception"], False, 0),
    (
        "v0.14.0-dict-default.log",
        "FULL_AND_PIECEWISE",
        "FULL_AND_PIECEWISE",
        False,
        True,
        {"mixed/PIECEWISE": 51, "decode/FULL": 35},
        [],
        False,
        0,
    ),
    (
        "v0.20.0-profiling-spec-decode.log",
        "FULL_AND_PIECEWISE",
        "PIECEWISE",
        True,
        True,
        {"mixed/PIECEWISE": 51},
        [],
        False,
        0,
    ),
    (
        "v0.30.0-v2-double-capture-tp2.log",
        "FULL_AND_PIECEWISE",
        "FULL_AND_PIECEWISE",
        False,
        True,
        {"unspecified/PIECEWISE": 67, "unspecified/FULL": 35},
        [],
        False,
        0,
    ),
    ("v0.14.0-eager.log", "NONE", "NONE", False, False, {}, [], True, 0),
    (
        "v0.11.0-oom-during-capture.log",
        "FULL_AND_PIECEWISE",
        "FULL_AND_PIECEWISE",
        False,
        False,
        {},
        ["engine_failed", "exception", "oom"],
        False,
        0,
    ),
    ("v0.11.0-hip-error.log", "FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE", False, False, {}, ["gpu_error"], False, 0),
    ("v0.14.0-restart.log", "FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE", False, False, {}, [], False, 1),
    ("v0.10.2-eager.log", "NONE", "NONE", False, False, {}, [], True, 0),
    ("v0.11.0-json-restart-ansi.log", "FULL_AND_PIECEWISE", "FULL_AND_PIECEWISE", False, False, {}, [], False, 1),
]


@pytest.mark.parametrize("name,req,eff,down,fin,graphs,fails,eager,restarts", CASES, ids=[c[0] for c in CASES])
def test_fixture(name, req, eff, down, fin, graphs, fails, eager, restarts) -> None:
    s = summarise(name)
    assert (s["requested_mode"], s["effective_mode"], s["downgraded"]) == (req, eff, down)
    assert s["capture_finished"] is fin
    assert s["graphs"] == dict(sorted(graphs.items()))
    assert s["failures"] == fails
    assert s["eager"] is eager
    assert s["restarts"] == restarts


def test_v2_profiling_pass_is_not_the_final_capture() -> None:
    state = LogState()
    lines = (FIXTURES / "v0.30.0-v2-double-capture-tp2.log").read_text().splitlines()
    kv = next(i for i, line in enumerate(lines) if "Available KV cache memory" in line)
    for line in lines[:kv]:
        state.feed(line)
    assert state.engine.profile_passes == 1
    assert not state.engine.capture_finished  # two `finished` lines seen, both profile-only


def test_tp_worker_lines_count_once_and_late_bars_settle_the_mode() -> None:
    s = summarise("v0.30.0-v2-double-capture-tp2.log")
    assert s["capture_seconds"] == 13 and s["capture_gib"] == 0.8
    assert not s["downgraded"]  # TP1 finished before rank 0 drew its FULL bar: no false downgrade


def test_restart_resets_the_engine_and_counts() -> None:
    s = summarise("v0.14.0-restart.log")
    assert s["engines_seen"] == 2 and s["restarts"] == 1
    assert not s["capture_finished"]
    assert 0.1 < s["progress"] < 0.3


def L(msg: str, src: str = "core.py", level: str = "INFO", proc: str = "EngineCore_DP0 pid=412") -> str:  # noqa: N802
    """One line as vLLM's logger prints it: process prefix, level, date, [file:line], message."""
    return f"({proc}) {level} 12-02 11:00:00 [{src}:1] {msg}" if proc else f"{level} 12-02 11:00:00 [{src}:1] {msg}"


def test_both_config_formats() -> None:
    json_line = L(
        'Initializing a V1 LLM engine (v0.11.0) with config: compilation_config={"level":3,"cudagraph_mode":[2,0]}'
    )
    dict_line = L(
        "Initializing a V1 LLM engine (v0.14.0) with config: compilation_config={'cudagraph_mode': "
        "<CUDAGraphMode.FULL_DECODE_ONLY: (2, 0)>}"
    )
    for line, version in ((json_line, "0.11.0"), (dict_line, "0.14.0")):
        start, config = lp.parse_line(line)
        assert (start.kind, start.mode, start.text) == (lp.ENGINE_START, "FULL_DECODE_ONLY", version)
        assert config.kind == lp.CONFIG and json.loads(config.text) == {"cudagraph_mode": "FULL_DECODE_ONLY"}
    for value, mode in (("0", "NONE"), ("1", "PIECEWISE"), ("2", "FULL"), ("[2,1]", "FULL_AND_PIECEWISE")):
        start, _ = lp.parse_line(
            L(f'Initializing a V1 LLM engine (v0.10.2) with config: compilation_config={{"cudagraph_mode":{value}}}')
        )
        assert start.mode == mode
    # Only compilation_config's own key counts: the same text under another key is no mode at all.
    start, error = lp.parse_line(L('Initializing a V1 LLM engine (v0.10.2) with config: x={"cudagraph_mode":2}'))
    assert (start.mode, error.kind) == ("unknown", lp.CONFIG_ERROR)


def test_ansi_colours_and_carriage_returns() -> None:
    line = (
        "\x1b[1;36m(EngineCore_DP0 pid=1)\x1b[0m Capturing CUDA graphs (decode, FULL):  10%|| "
        "3/35 [00:01<00:07]\rCapturing CUDA graphs (decode, FULL):  20%|| 7/35 [00:02<00:06]"
    )
    events = lp.parse_line(line)
    assert [(e.done, e.total) for e in events] == [(3, 35), (7, 35)]


def test_downgrade_with_spec_decode_names_backend() -> None:
    (ev,) = lp.parse_line(
        L(
            "CUDAGraphMode.FULL_AND_PIECEWISE is not supported with spec-decode for attention "
            "backend AiterFlashAttentionBackend (support: "
            "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE); setting cudagraph_mode=PIECEWISE",
            "compilation.py",
            "WARNING",
        )
    )
    assert (ev.kind, ev.text, ev.mode, ev.reason) == (
        lp.DOWNGRADE,
        "FULL_AND_PIECEWISE",
        "PIECEWISE",
        "AiterFlashAttentionBackend",
    )


def test_request_lines_are_ignored() -> None:
    assert lp.parse_line('INFO:     127.0.0.1:5000 - "POST /v1/completions HTTP/1.1" 200 OK') == []
    assert lp.parse_line("Received request cmpl-1: prompt: 'tell me about eager beavers'") == []


def test_traceback_after_startup_is_not_a_capture_failure() -> None:
    state = LogState()
    for line in (FIXTURES / "v0.14.0-dict-default.log").read_text().splitlines():
        state.feed(line)
    state.feed(L("Traceback (most recent call last):", "core.py", "ERROR"))
    assert state.failures_total == {}
    state.feed("RuntimeError: HIP error: an illegal memory access was encountered")
    assert state.failures_total == {"gpu_error": 1}  # a GPU fault is reported whenever it happens


def test_requested_hint_used_when_log_is_silent() -> None:
    state = LogState(requested_hint="FULL")
    state.feed(L("Available KV cache memory: 1 GiB", "gpu_worker.py"))
    assert state.engine.requested == "FULL"


def test_pre_v2_release_finished_counts_even_without_kv_cache_line() -> None:
    state = LogState()
    for line in [
        L(
            "Initializing a V1 LLM engine (v0.14.0) with config: compilation_config={'cudagraph_mode': "
            "<CUDAGraphMode.PIECEWISE: 1>}"
        ),
        "Capturing CUDA graphs (mixed prefill-decode, PIECEWISE): 100%|##| 51/51 [00:08<00:00]",
        L("Graph capturing finished in 9 secs, took 0.40 GiB", "gpu_model_runner.py"),
    ]:
        state.feed(line)
    assert state.engine.capture_finished and state.engine.profile_passes == 0
    late = LogState()  # joined mid-way, version unknown: a lone finished line may be the profile pass
    late.feed(L("Graph capturing finished in 9 secs, took 0.40 GiB", "gpu_model_runner.py"))
    assert not late.engine.capture_finished


def test_container_restart_then_config_line_counts_once() -> None:
    cfg = L(
        "Initializing a V1 LLM engine (v0.14.0) with config: compilation_config={'cudagraph_mode': "
        "<CUDAGraphMode.PIECEWISE: 1>}"
    )
    state = LogState()
    state.feed(cfg)
    state.restart(container=True)  # the k8s source saw restartCount change
    state.feed(cfg)  # the new container's first engine line: same restart
    assert state.restarts == 1
    state.feed(cfg)  # an in-container engine restart afterwards does count
    assert state.restarts == 2


@pytest.mark.parametrize(
    ("line", "mode"),
    [
        (
            L(
                "Pooling models do not support full cudagraphs. Overriding cudagraph_mode to PIECEWISE.",
                "vllm.py",
                "WARNING",
            ),
            "PIECEWISE",
        ),
        (
            L(
                "KV connector X requires PIECEWISE CUDA graph mode due to layerwise async operations that cannot be "
                "captured in CUDA graphs. Overriding cudagraph_mode from FULL_AND_PIECEWISE to PIECEWISE.",
                "vllm.py",
                "WARNING",
            ),
            "PIECEWISE",
        ),
        (L("Cudagraph mode FULL is not compatible with compilation mode 0.Overriding to NONE.", "vllm.py"), "NONE"),
        (
            L(
                "CUDA graphs are not supported with stock torch.compile in Model Runner V2. Overriding cudagraph_mode "
                "FULL_AND_PIECEWISE to NONE.",
                "vllm.py",
            ),
            "NONE",
        ),
        (
            L(
                "Piecewise compilation with empty splitting_ops does not contain piecewise cudagraph. Setting "
                "cudagraph_mode to FULL. Hint: ...",
                "compilation.py",
                "WARNING",
            ),
            "FULL",
        ),
    ],
)
def test_config_overrides_are_downgrades(line: str, mode: str) -> None:
    (ev,) = lp.parse_line(line)
    assert (ev.kind, ev.mode) == (lp.DOWNGRADE, mode)


def test_config_line_differing_from_args_is_a_downgrade() -> None:
    state = LogState()
    state.feed(
        L(
            "non-default args: {'model': 'm', 'compilation_config': {\"cudagraph_mode\": \"FULL_AND_PIECEWISE\"}}",
            "utils.py",
            proc="APIServer pid=301",
        )
    )
    state.feed(
        L(
            "Initializing a V1 LLM engine (v0.20.0) with config: compilation_config={'cudagraph_mode': "
            "<CUDAGraphMode.PIECEWISE: 1>}"
        )
    )
    e = state.engine
    assert (e.requested, e.effective, e.downgraded) == ("FULL_AND_PIECEWISE", "PIECEWISE", True)
    assert e.config_mode == "PIECEWISE"


@pytest.mark.parametrize(
    ("profile", "mode"),
    [
        ("PIECEWISE=51 (largest=512), FULL=35 (largest=256)", "FULL_AND_PIECEWISE"),
        ("PIECEWISE=51 (largest=512)", "PIECEWISE"),
    ],
)
def test_profiling_line_shows_the_resolved_mode(profile: str, mode: str) -> None:
    state = LogState(requested_hint="FULL_AND_PIECEWISE")
    state.feed(
        "(EngineCore_DP0 pid=1) INFO 12-02 11:00:03 [gpu_model_runner.py:5964] Profiling CUDA graph memory: " + profile
    )
    assert state.engine.effective == mode
    assert state.engine.downgraded is (mode != "FULL_AND_PIECEWISE")
    assert not state.engine.capture_finished


def test_prefilter_lets_every_event_line_through() -> None:
    """The cheap prefilter must never hide a line the full parser would act on (fixtures + known templates)."""
    lines = [x for f in sorted(FIXTURES.glob("*.log")) for x in f.read_text().splitlines()]
    lines += [
        L(
            "Skipping CUDA graph capture. To turn on CUDA graph capture, ensure `cudagraph_mode` was not set",
            "gpu_model_runner.py",
            "WARNING",
        ),
        L("Skipping encoder and decoder CUDA graph capture. To enable encoder capture, ensure ...", "model_runner.py"),
        L("Enforce eager set, overriding optimization level to -O0", "vllm.py", "WARNING"),
        "HIP error: invalid device function",
        "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB",
        "Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x2. Reason: Page not present",
        L("EngineCore failed to start.", "core.py", "ERROR"),
        L(
            "RuntimeError: Engine core initialization failed. See root cause above.",
            "utils.py",
            "ERROR",
            "APIServer pid=301",
        ),
    ]
    acted = 0
    for x in lines:
        line = logline.split(x)
        if lp._parse_logger(line) if line.level else lp._parse_raw(line):
            acted += 1
            assert lp.parse_line(x), x
    assert acted > 60


def test_a_clean_stop_of_a_real_0_32_engine_is_no_failure() -> None:
    """vLLM 0.32.0 on CPU, stopped (SIGINT) and started again behind the same log, with a client's forged engine
    lines in between (the live authority test's log). Each stop logs `[shutdown]` lines and then an EngineDeadError
    traceback through the logger (`AsyncLLM output_handler failed`): that is teardown, not a capture failure, so no
    failure is counted; without the `[shutdown]` lines the same traceback counts, and an OOM after them still does."""
    name = "v0.32.0-cpu-restart-real.log"
    s = summarise(name)
    assert (s["engines_seen"], s["restarts"], s["instance"], s["eager"]) == (2, 1, 2, True)
    assert s["failures"] == [] and s["failures_total"] == {}, s
    lines = (FIXTURES / name).read_text().splitlines()
    assert sum("Traceback (most recent call last):" in ln and "[async_llm.py:" in ln for ln in lines) == 2
    state = LogState()
    for line in lines:
        if "[shutdown]" not in line:
            state.feed(line)
    assert state.summary()["failures_total"] == {"exception": 2}
    state = LogState()
    for line in lines:
        state.feed(line)
    state.feed(
        "(EngineCore pid=22333) ERROR 12-03 17:27:12 [core.py:1000] torch.OutOfMemoryError: HIP out of memory. "
        "Tried to allocate 2.00 GiB"
    )
    assert state.summary()["failures_total"] == {"oom": 1}


def test_a_real_0_32_cpu_log_with_client_text_in_it() -> None:
    """vLLM 0.32.0 on CPU, eager, request logging on; a client asked with engine lines as stop strings and for the
    path `/hipError%0aTraceback (most recent call last):`. The engine is seen, the client text is not."""
    s = summarise("v0.32.0-cpu-eager-real.log")
    assert (s["vllm_version"], s["config_mode"], s["eager"], s["effective_mode"]) == ("0.32.0", "NONE", True, "NONE")
    assert s["failures"] == [] and s["engines_seen"] == 1 and s["restarts"] == 0 and s["instance"] == 1
    text = (FIXTURES / "v0.32.0-cpu-eager-real.log").read_text()
    assert "EngineCore failed to start" in text and "hipError" in text  # the client's text is in the log


def test_kv_cache_memory_bytes_sizes_the_cache_too() -> None:
    """--kv-cache-memory-bytes: vLLM (0.22-0.26 gpu_worker.py) skips memory profiling and never prints
    `Available KV cache memory`; the capture after its `reserved ... for KV Cache` line is the real one (issue 29:
    the sidecar waited at 0% forever). The real 0.26.0 FULL log with that one line as such a server prints it."""
    text = (REAL_H200 / "FULL.log").read_text()
    kv_line = next(ln for ln in text.splitlines() if "Available KV cache memory" in ln)
    prefix = kv_line.split("Available KV cache memory")[0]
    sized = text.replace(
        kv_line,
        prefix + "Initial free memory 138.19 GiB, reserved 2.79 GiB memory for KV Cache as specified by "
        "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the gpu_memory_utilization "
        "config. Only use kv_cache_memory_bytes config when you want manual control of KV cache memory size. If "
        "OOM'ed, check the difference of initial free memory between the current run and the previous run where "
        "kv_cache_memory_bytes is suggested and update it correspondingly.",
    )
    assert sized != text
    state = LogState()
    for line in sized.splitlines():
        state.feed(line)
    s = state.summary()
    assert s["capture_finished"] and s["effective_mode"] == "FULL" and s["graphs"] == {"unspecified/FULL": 35}


def test_an_excerpt_without_the_engine_line_still_says_version_and_mode() -> None:
    """What operators paste: the API server's version and `non-default args` lines, marked as such."""
    s = summarise("v0.9.2rc2.dev1221-rocm-excerpt.log")
    assert s["excerpt"] is True and s["engines_seen"] == 0
    assert s["vllm_version"] == "0.9.2rc2.dev1221+g7c4a2b5d3.rocm700"
    assert s["requested_mode"] == "FULL"
    assert s["facts_source"] == {"vllm_version": "API server version line", "requested_mode": "non-default args"}
    # A full log says where its facts came from too.
    full = summarise("v0.32.0-cpu-eager-real.log")
    assert full["excerpt"] is False and full["facts_source"]["vllm_version"] == "engine config line"


@pytest.mark.parametrize(
    ("value", "mode"),
    [
        ("'{\"cudagraph_mode\": 2}'", "FULL"),
        ("'{\"cudagraph_mode\": [2, 1]}'", "FULL_AND_PIECEWISE"),
        ('\'{"cudagraph_mode": "full_decode_only"}\'', "FULL_DECODE_ONLY"),
        ('{"full_cuda_graph": true, "cudagraph_mode": "FULL"}', "FULL"),
        ("{'cudagraph_mode': 'PIECEWISE'}", "PIECEWISE"),
        ("{'mode': None, 'cudagraph_mode': <CUDAGraphMode.NONE: 0>}", "NONE"),
    ],
)
def test_non_default_args_mode_in_every_spelling(value: str, mode: str) -> None:
    line = L(f"non-default args: {{'model': 'm', 'compilation_config': {value}}}", src="api_utils.py")
    assert [(e.kind, e.mode) for e in lp.parse_line(line)] == [(lp.REQUESTED, mode)]


def test_non_default_args_are_read_by_structure() -> None:
    """A model path or name that spells a mode is a value, not the mode (a substring search took it before)."""
    line = L(
        "non-default args: {'model': '/m/cudagraph_mode=FULL_DECODE_ONLY', 'enforce_eager': False, "
        "'served_model_name': ['max_num_seqs: 1'], 'compilation_config': {'cudagraph_mode': <CUDAGraphMode.FULL: 2>}}",
        src="api_utils.py",
    )
    assert [(e.kind, e.mode, e.text) for e in lp.parse_line(line)] == [(lp.REQUESTED, "FULL", "")]


def test_the_engine_line_settles_what_v2_bars_cannot() -> None:
    """V2 bars say only FULL: the engine config line (not the args, which a path could spoof) says which FULL."""
    state = LogState()
    state.feed(
        L("non-default args: {'compilation_config': '{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}'}", "api_utils.py")
    )
    state.feed(
        L(
            "Initializing a V1 LLM engine (v0.26.0) with config: model='m', "
            "compilation_config={'cudagraph_mode': <CUDAGraphMode.FULL: 2>}"
        )
    )
    state.feed("(EngineCore pid=1) Capturing CUDA graphs (FULL): 100%|##| 35/35 [00:01<00:00, 30.00it/s]")
    state.feed(L("Available KV cache memory: 1.00 GiB", src="gpu_worker.py"))
    state.feed("(EngineCore pid=1) Capturing CUDA graphs (FULL): 100%|##| 35/35 [00:01<00:00, 30.00it/s]")
    state.feed(L("Graph capturing finished in 1 secs, took 0.13 GiB", src="model_runner.py", proc="EngineCore pid=1"))
    assert state.summary()["effective_mode"] == "FULL"
