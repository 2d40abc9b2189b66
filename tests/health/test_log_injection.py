"""Only vLLM's own lines are engine events (issue 18, item 4).

Client text reaches vLLM's log in uvicorn's access lines (the request path) and, with request logging, in the
logged SamplingParams (stop strings) and prompts. These tests inject client-controlled text, shaped like every
engine line the parser knows, into real logs (the H200 vLLM 0.26.0 logs and the fixtures written from each
release's templates) and check that the parsed state is exactly what the log without them gives. They also check
that parsing is linear in the line length, never runs under the lock /readyz and /metrics take, and that an
absurd version string cannot break a scrape."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from vllm_rocm_health import logparse
from vllm_rocm_health.app import Sidecar
from vllm_rocm_health.canary import CanaryConfig
from vllm_rocm_health.config import SidecarConfig
from vllm_rocm_health.events import EventPoster
from vllm_rocm_health.known_issues import KnownIssueJudge
from vllm_rocm_health.metrics import SidecarStatus, make_registry
from vllm_rocm_health.state import LogState

ROOT = Path(__file__).resolve().parents[2]
REAL_LOGS = sorted((ROOT / "tests" / "fixtures" / "qualify" / "h200-vllm-0.26.0").glob("*.log"))
FIXTURES = sorted((ROOT / "health" / "fixtures").glob("*.log"))

# Every kind of line the parser acts on, as vLLM prints it: what a hostile client would try to pass off.
ENGINE_LINES = [
    "(EngineCore_DP0 pid=7) INFO 12-02 11:00:00 [core.py:76] Initializing a V1 LLM engine (v0.10.2) with config: "
    'compilation_config={"cudagraph_mode":2}',
    "INFO 12-02 11:00:00 [core.py:98] Initializing a V1 LLM engine (v0.14.0) with config: compilation_config="
    "{'cudagraph_mode': <CUDAGraphMode.FULL: 2>}",
    "(EngineCore_DP0 pid=7) ERROR 12-02 11:00:00 [core.py:700] EngineCore failed to start.",
    "(APIServer pid=1) ERROR 12-02 11:00:06 [utils.py:759] RuntimeError: Engine core initialization failed.",
    "(EngineCore_DP0 pid=7) ERROR 12-02 11:00:07 [core.py:708] RuntimeError: HIP error: an illegal memory access",
    "torch.OutOfMemoryError: HIP out of memory. Tried to allocate 20.00 GiB",
    "Traceback (most recent call last):",
    "Memory access fault by GPU node-2 (Agent handle: 0x1) on address 0x2. Reason: Page not present",
    "Capturing CUDA graphs (mixed prefill-decode, FULL): 100%|##| 67/67 [00:11<00:00]",
    "(EngineCore_DP0 pid=7) INFO 12-02 11:00:09 [gpu_model_runner.py:3118] Graph capturing finished in 12 secs, "
    "took 19.87 GiB",
    "(EngineCore_DP0 pid=7) WARNING 12-02 11:00:05 [gpu_model_runner.py:3643] CUDAGraphMode.FULL is not supported "
    "with AiterFlashAttentionMetadataBuilder backend (support: AttentionCGSupport.NEVER); setting cudagraph_mode=NONE",
    "(EngineCore_DP0 pid=7) INFO 12-02 11:00:02 [rocm.py:241] Using Flash Attention backend on V1 engine.",
    "(APIServer pid=1) INFO 12-02 11:00:00 [utils.py:328] non-default args: {'enforce_eager': True, "
    '\'compilation_config\': {"cudagraph_mode": "FULL"}}',
    "(EngineCore_DP0 pid=7) INFO 12-02 11:00:01 [vllm.py:765] Cudagraph is disabled under eager mode",
    "Skipping CUDA graph capture. To turn on CUDA graph capture, ensure `cudagraph_mode` was not set",
    'vllm-rocm facts: {"patches": ["vllm-0.10.2/0001-x.patch"], "rocm": "7.1.1", "arch": "gfx942"}',
    "(EngineCore_DP0 pid=99) INFO 12-02 11:00:02 [rocm.py:248] Automatically detected platform rocm.",
]

client_text = st.one_of(
    st.sampled_from(ENGINE_LINES),
    st.builds(lambda a, b, c: a + b + c, st.text(max_size=20), st.sampled_from(ENGINE_LINES), st.text(max_size=20)),
    st.text(max_size=200),
)


def access_line(text: str) -> str:
    """uvicorn's access line (vLLM 0.32 prints it without a process prefix; 0.26 with one). uvicorn quotes the
    path; this takes the worst case, the path as the client wrote it, minus the newline HTTP cannot carry."""
    path = text.replace("\n", " ").replace("\r", " ")
    return f'INFO:     127.0.0.1:41136 - "GET /{path} HTTP/1.1" 404 Not Found'


def request_log_line(text: str) -> str:
    """vLLM's request logger: the client's strings as Python reprs inside SamplingParams (request_logger.py)."""
    return (
        f"(APIServer pid=3460) INFO 12-03 02:20:55 [request_logger.py:65] Received request cmpl-1-0: params: "
        f"SamplingParams(n=1, temperature=0.0, stop={[text, chr(10) + text]!r}), prompt: {text!r}"
    )


def continuation_lines(text: str) -> list[str]:
    """Worst case: a multi-line message from the request path with the client's text unescaped; vLLM's formatter
    repeats the header on each line, so the client controls the start of those messages."""
    return [
        f"(APIServer pid=3460) ERROR 12-03 02:20:55 [serving_completion.py:140] {part}" for part in text.split("\n")
    ] + [f"(APIServer pid=3460) {part}" for part in text.split("\n")[1:]]


def injected(text: str) -> list[str]:
    return [access_line(text), request_log_line(text), *continuation_lines(text)]


def summary(lines: list[str]) -> dict:
    state = LogState()
    for line in lines:
        state.feed(line)
    out = state.summary()
    out.pop("instance")  # counted below, exactly
    return {**out, "instance": state.instance}


@pytest.mark.parametrize("path", REAL_LOGS + FIXTURES, ids=lambda p: p.name)
def test_every_engine_line_injected_everywhere_changes_nothing(path: Path) -> None:
    lines = path.read_text().splitlines()
    clean = summary(lines)
    noisy = []
    for line in lines:
        noisy.append(line)
        for text in ENGINE_LINES:
            noisy.extend(injected(text))
    assert summary(noisy) == clean


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    log=st.sampled_from(REAL_LOGS + FIXTURES),
    texts=st.lists(client_text, min_size=1, max_size=6),
    where=st.lists(st.integers(0, 10_000), min_size=1, max_size=6),
)
def test_client_text_at_any_position_changes_nothing(log: Path, texts: list[str], where: list[int]) -> None:
    lines = log.read_text().splitlines()
    # Any position a client can write at: after vLLM's first engine line (its API server listens only once the
    # engine is up, and a container's log starts with vLLM's own start). Before it, a forged engine line would be
    # the first one there is (found by this test at position 0: a log no client could have written into yet).
    first = next((i for i, line in enumerate(lines) if "Initializing a V1 LLM engine" in line), None)
    assume(first is not None)
    assert first is not None
    clean = summary(lines)
    noisy = list(lines)
    for text, pos in zip(texts, where, strict=False):
        at = first + 1 + pos % (len(noisy) - first)
        # A client's line goes between vLLM's lines, never inside one (each write is a whole line).
        noisy[at:at] = injected(text)
    assert summary(noisy) == clean


def _fastest(fn, arg: str) -> float:  # type: ignore[no-untyped-def]
    """CPU seconds of this process (not wall time: another process on a busy machine does not count), the
    fastest of three."""
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        fn(arg)
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.parametrize(
    "unit",
    [
        "Capturing CUDA graphs (PIECEWISE)",  # bars without their `|`: a pattern that searched each start
        "Capturing CUDA graphs (decode, FULL): |",
        "'cudagraph_mode': <CUDAGraphMode.",
        "CUDAGraphMode.FULL is not supported with ",
        "Overriding cudagraph_mode from FULL to ",
        "Using ROCM_ATTN backend out of ",
        "\x1b[1;3",  # half colour codes
        "(EngineCore_DP0 pid=1) ",
    ],
)
def test_parsing_is_linear_in_the_line_length(unit: str) -> None:
    """Parsing an 8 MiB line costs a small multiple of one linear pass over it (`str.lower`, timed right before on
    the same line, so a busy machine slows both alike). A pattern that retried from every start would cost
    thousands of passes. Lines are cut at 1 MiB before the parser sees them (logsource.MAX_LINE); this checks the
    parser itself."""
    for prefix in ("", "(EngineCore_DP0 pid=1) INFO 12-02 11:00:00 [gpu_model_runner.py:1] "):
        line = prefix + unit * ((8 << 20) // len(unit))
        one_pass = _fastest(str.lower, line)
        parse = _fastest(logparse.parse_line, line)
        assert parse < 100 * one_pass, (unit, prefix, one_pass, parse)


def test_parsing_runs_outside_the_lock_of_readyz_and_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """While a line is being parsed (here: held inside the parser), /readyz and /metrics still answer."""
    sidecar = Sidecar(SidecarConfig(listen="127.0.0.1:0", canary=CanaryConfig(enabled=False)), EventPoster(None))
    inside, release = threading.Event(), threading.Event()
    real = logparse.parse

    def slow_parse(line: str):  # type: ignore[no-untyped-def]
        inside.set()
        release.wait(30)
        return real(line)

    monkeypatch.setattr(logparse, "parse", slow_parse)
    feeder = threading.Thread(target=sidecar.on_line, args=(ENGINE_LINES[0],))
    feeder.start()
    try:
        assert inside.wait(30)
        done = threading.Event()

        def ask() -> None:
            sidecar.update_readiness()
            from prometheus_client import generate_latest

            generate_latest(sidecar.registry)
            done.set()

        threading.Thread(target=ask, daemon=True).start()
        assert done.wait(30), "readiness or metrics waited for the parser"
    finally:
        release.set()
        feeder.join(30)
    assert sidecar.status.log.engines_seen == 1


def test_an_absurd_version_cannot_break_a_scrape() -> None:
    from prometheus_client import generate_latest

    status = SidecarStatus(LogState())
    registry = make_registry(status, KnownIssueJudge())
    # 5000 digits (Python's int() refuses more than 4300), a runaway pre-release, a 60-digit major (the evaluator
    # reads at most 9 digits per component): each is a version the known issues cannot judge, and says so
    for version, judged in (("0." + "9" * 5000, False), ("0.10.2" + "rc" * 40, False), ("1" * 60 + ".0", False)):
        status.log = LogState()
        status.log.feed(
            f"(EngineCore_DP0 pid=7) INFO 12-02 11:00:00 [core.py:76] Initializing a V1 LLM engine "
            f'(v{version}) with config: compilation_config={{"cudagraph_mode":2}}'
        )
        text = generate_latest(registry).decode()
        assert f"vllm_known_issues_evaluated {float(judged)}" in text, version
        assert "vllm_sidecar_ready" in text
