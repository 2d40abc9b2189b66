"""The engine config line read by structure (configline.py): top-level keys only, nested values stay values, and a
line that does not read as vLLM's structure gives no facts rather than wrong ones. Fuzzed with text the model or the
operator chose, built the way vLLM prints it (repr for quoted values, dict repr / JSON for compilation_config)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from vllm_rocm_health import configline
from vllm_rocm_health import logparse as lp
from vllm_rocm_health.configline import ConfigLineError, engine_facts

MODES = {
    "NONE": ("<CUDAGraphMode.NONE: 0>", "0"),
    "PIECEWISE": ("<CUDAGraphMode.PIECEWISE: 1>", "1"),
    "FULL": ("<CUDAGraphMode.FULL: 2>", "2"),
    "FULL_DECODE_ONLY": ("<CUDAGraphMode.FULL_DECODE_ONLY: (2, 0)>", "[2,0]"),
    "FULL_AND_PIECEWISE": ("<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>", "[2, 1]"),
}


def vllm_line(
    *,
    model: str = "/models/m",
    served: str = "m",
    quantization: str | None = None,
    quant_config: dict | None = None,
    kv: str = "auto",
    tp: int = 1,
    mode: str = "FULL_AND_PIECEWISE",
    json_config: bool = False,
    spec: str | None = None,
    eager: bool = False,
) -> str:
    """A config line in the shape of VllmConfig.__str__ (0.26.0 order of keys; <=0.11 JSON compilation_config)."""
    enum, number = MODES[mode]
    if json_config:
        comp = '{"level":3,"debug_dump_path":"","cache_dir":"","cudagraph_mode":' + number + ',"compile_sizes":[]}'
    else:
        comp = (
            "{'mode': <CompilationMode.VLLM_COMPILE: 3>, 'splitting_ops': ['vllm::unified_attention'], "
            f"'cudagraph_mode': {enum}, 'pass_config': {{'fuse_norm_quant': False}}, "
            "'dynamic_shapes_config': {'type': <DynamicShapesType.BACKED: 'backed'>}}"
        )
    spec_text = "None" if spec is None else f"SpeculativeConfig(method={spec!r}, model=None, num_spec_tokens=3)"
    return (
        f"model={model!r}, speculative_config={spec_text}, tokenizer={model!r}, skip_tokenizer_init=False, "
        "tokenizer_mode=auto, revision=None, dtype=torch.bfloat16, max_seq_len=2048, "
        f"tensor_parallel_size={tp}, pipeline_parallel_size=1, data_parallel_size=1, "
        f"quantization={quantization}, quantization_config={quant_config!r}, enforce_eager={eager}, "
        f"kv_cache_dtype={kv}, device_config=cuda, "
        "structured_outputs_config=StructuredOutputsConfig(backend='auto', reasoning_parser=''), seed=0, "
        f"served_model_name={served}, enable_prefix_caching=True, pooler_config=None, compilation_config={comp}, "
        "kernel_config=KernelConfig(ir_op_priority=IrOpPriorityConfig(rms_norm=['native']), moe_backend='auto')"
    )


@pytest.mark.parametrize("json_config", [False, True])
@pytest.mark.parametrize("mode", list(MODES))
def test_every_mode_in_both_formats(mode: str, json_config: bool) -> None:
    facts = engine_facts(vllm_line(mode=mode, json_config=json_config))
    assert facts["cudagraph_mode"] == mode


def test_facts_of_the_top_level_only() -> None:
    quant = {"quant_method": "fp8", "kv_cache_dtype": "fp8", "note": "quantization=awq, tensor_parallel_size=8"}
    line = vllm_line(
        model="/m/kv_cache_dtype=fp8, cudagraph_mode=NONE",
        quantization="fp8",
        quant_config=quant,
        tp=2,
        spec="ngram",
    )
    assert engine_facts(line) == {
        "cudagraph_mode": "FULL_AND_PIECEWISE",
        "enforce_eager": False,
        "quantization": "fp8",
        "kv_cache_dtype": "auto",
        "tensor_parallel_size": 2,
        "pipeline_parallel_size": 1,
        "data_parallel_size": 1,
        "speculative_method": "ngram",
        "enable_prefix_caching": True,
    }


@pytest.mark.parametrize(
    ("served", "why"),
    [
        ("m, kv_cache_dtype=fp8", "twice"),  # a key the line already has
        ("m, compilation_config={'cudagraph_mode': <CUDAGraphMode.NONE: 0>}", "twice"),
        ("m, x=(", "unclosed"),
        ("m, x='", "unterminated"),
        ("m, plain words", "without key"),
        ("m)", "unbalanced"),
    ],
)
def test_an_ambiguous_line_gives_no_facts(served: str, why: str) -> None:
    """The served model name is printed bare: text that would change the structure makes the line unreadable."""
    with pytest.raises(ConfigLineError, match=why):
        engine_facts(vllm_line(served=served))


def test_missing_or_strange_mode_is_an_error() -> None:
    line = vllm_line().replace("'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>, ", "")
    with pytest.raises(ConfigLineError, match="no cudagraph_mode"):
        engine_facts(line)
    with pytest.raises(ConfigLineError, match="cudagraph_mode"):
        engine_facts(vllm_line().replace("<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>", "<Mode.X: 9>"))
    with pytest.raises(ConfigLineError, match="no compilation_config"):
        engine_facts("model='m', quantization=None")
    with pytest.raises(ConfigLineError):
        engine_facts(vllm_line(tp=2).replace("tensor_parallel_size=2", "tensor_parallel_size=two"))


def test_the_parser_emits_an_error_event_not_a_guess() -> None:
    msg = "Initializing a V1 LLM engine (v0.26.0) with config: " + vllm_line(served="m, kv_cache_dtype=fp8")
    events = lp.parse_line(f"(EngineCore_DP0 pid=1) INFO 12-04 10:00:00 [core.py:116] {msg}")
    assert [e.kind for e in events] == [lp.ENGINE_START, lp.CONFIG_ERROR]
    assert events[0].mode == "unknown" and events[0].text == "0.26.0" and "twice" in events[1].reason


# Model-controlled text: paths and quantization configs are printed as Python reprs, so any text must survive.
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=60)
QUANT = st.none() | st.dictionaries(TEXT, st.none() | TEXT | st.integers() | st.lists(TEXT, max_size=3), max_size=4)
# The served model name is printed bare; an operator's name is a DNS-label-like word, or anything (then: refused).
SERVED = st.from_regex(r"[a-z0-9][a-z0-9./_-]{0,40}", fullmatch=True) | TEXT.filter(bool)


@settings(max_examples=400, deadline=None)
@given(
    model=TEXT,
    served=SERVED,
    quant=QUANT,
    mode=st.sampled_from(list(MODES)),
    json_config=st.booleans(),
    kv=st.sampled_from(["auto", "fp8", "fp8_e4m3", "bfloat16"]),
    tp=st.integers(1, 64),
    eager=st.booleans(),
)
def test_fuzz_facts_are_right_or_refused(model, served, quant, mode, json_config, kv, tp, eager) -> None:
    line = vllm_line(
        model=model, served=served, quant_config=quant, mode=mode, json_config=json_config, kv=kv, tp=tp, eager=eager
    )
    try:
        facts = engine_facts(line)
    except ConfigLineError:
        # Refusing is allowed only where the bare served name could change the structure.
        assert served != served.strip() or not _plain(served), (served, line)
        return
    assert (facts["cudagraph_mode"], facts["kv_cache_dtype"], facts["tensor_parallel_size"]) == (mode, kv, tp)
    assert facts["enforce_eager"] is eager and facts["quantization"] == "none"


def _plain(name: str) -> bool:
    return all(c.isalnum() or c in "./_-" for c in name)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_fuzz_arbitrary_text_never_raises_anything_else(text: str) -> None:
    try:
        facts = engine_facts(text)
    except ConfigLineError:
        return
    assert facts["cudagraph_mode"] in MODES


def test_unquote_reads_both_string_spellings() -> None:
    assert configline.unquote("'it\\'s'") == "it's"
    assert configline.unquote('"a\\"b"') == 'a"b'
    assert configline.unquote("bare") == "bare"
    assert json.loads(json.dumps(configline.parse_mapping('{"a":1,"b":{"c":[1,2]}}'))) == {"a": "1", "b": '{"c":[1,2]}'}
