"""The chart's sidecar settings carry the sidecar's own ranges: values.schema.json refuses what the sidecar would
refuse at start, each value reaches its flag, and 0 (the sidecar's default) renders no flag. The ranges are read
from the sidecar's configuration dataclasses, so a change on either side fails here."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml
from vllm_rocm_health.config import SidecarConfig, _fields

from tests.support.helm_chart import CHART, arg_value, container, pod_spec, render, render_error

# chart value (sidecar.<name>) -> sidecar setting. ZERO_IS_DEFAULT: 0 renders no flag (the sidecar's default); the
# others are always rendered, and their chart default is the sidecar's default.
SETTINGS = {
    "canaryInterval": "canary_interval",
    "canaryTimeout": "canary_timeout",
    "canaryMaxAgeIntervals": "canary_max_age_intervals",
    "canaryMaxTokens": "canary_max_tokens",
    "healthInterval": "health_interval",
    "healthTimeout": "health_timeout",
    "canaryNumProblems": "canary_num_problems",
    "canarySeed": "canary_seed",
    "canaryMaxRequests": "canary_max_requests",
    "canaryConcurrency": "canary_concurrency",
    "canaryLongPrompts": "canary_long_prompts",
    "canaryFreshProblems": "canary_fresh_problems",
    "canaryScoreTolerance": "canary_score_tolerance",
    "canaryFingerprintTolerance": "canary_fingerprint_tolerance",
    "canaryIdleProbeAfter": "canary_idle_probe_after",
    "canaryMaxBackoffIntervals": "canary_max_backoff_intervals",
}
ZERO_IS_DEFAULT = {"canaryTimeout", "canaryMaxAgeIntervals", "canaryMaxTokens", "healthInterval"}
ALWAYS_RENDERED = set(SETTINGS) - ZERO_IS_DEFAULT
# Settings that must match the baseline (check_matches): a render that changes them needs a baseline taken so.
BASELINE_BOUND = {"canarySeed": "seed", "canaryNumProblems": "num_problems"}


def sidecar_range(name: str) -> tuple[float, float, type]:
    for field_name, f, tp in _fields(SidecarConfig):
        if field_name == name:
            lo, hi = f.metadata["range"]
            return lo, hi, tp
    raise AssertionError(f"no sidecar setting {name}")


def schema_of(value: str) -> dict[str, Any]:
    schema = json.loads((CHART / "values.schema.json").read_text())
    return schema["properties"]["sidecar"]["properties"][value]


def test_every_numeric_sidecar_setting_with_a_chart_value_is_covered() -> None:
    chart_values = set(json.loads((CHART / "values.schema.json").read_text())["properties"]["sidecar"]["properties"])
    numeric = {v for v in chart_values if schema_of(v).get("type") in ("number", "integer")} - {"port"}
    assert numeric == set(SETTINGS), "a numeric sidecar value without a range test"


@pytest.mark.parametrize("value", sorted(SETTINGS))
def test_schema_range_equals_the_sidecar_range(value: str) -> None:
    lo, hi, tp = sidecar_range(SETTINGS[value])
    s = schema_of(value)
    bounds = s if value in ALWAYS_RENDERED else next(b for b in s["anyOf"] if "minimum" in b)
    assert (bounds["minimum"], bounds["maximum"]) == (lo, hi)
    if value in ZERO_IS_DEFAULT:
        assert {"const": 0} in s["anyOf"]
    assert s["type"] == ("integer" if tp is int else "number")


@pytest.mark.parametrize("value", sorted(SETTINGS))
def test_each_value_reaches_its_flag_and_out_of_range_is_refused(value: str) -> None:
    lo, hi, tp = sidecar_range(SETTINGS[value])
    flag = "--" + SETTINGS[value].replace("_", "-")
    for x in (lo, hi) if lo != 0 or value not in ZERO_IS_DEFAULT else (hi,):
        args = container(pod_spec(render({f"sidecar.{value}": x})), "health")["args"]
        # Exactly as the sidecar's flag parser reads it: an integer setting never as 2.147483647e+09.
        assert tp(arg_value(args, flag)) == x, arg_value(args, flag)
    for bad in (hi * 10, lo - (1 if tp is int else (lo / 2 if lo > 0 else 0.5)), -1):
        if bad == 0 and value in ZERO_IS_DEFAULT:
            continue
        err = render_error({f"sidecar.{value}": bad})
        assert f"sidecar.{value}" in err or "sidecar" in err, err
    if value in ZERO_IS_DEFAULT:
        args = container(pod_spec(render({f"sidecar.{value}": 0})), "health")["args"]
        assert flag not in args  # the sidecar's default


def test_the_defaults_are_inside_the_ranges() -> None:
    """Every ranged setting of the sidecar, not only those the chart exposes: a default the sidecar itself would
    refuse at start would make every plain `vllm-rocm-health serve` fail."""
    ranged = [(name, f) for name, f, _ in _fields(SidecarConfig) if "range" in f.metadata]
    assert {SETTINGS[v] for v in SETTINGS} <= {name for name, _ in ranged}
    for name, f in ranged:
        lo, hi = f.metadata["range"]
        assert lo <= f.default <= hi, (name, f.default)


def sidecar_default(name: str) -> Any:
    return next(f.default for field_name, f, _ in _fields(SidecarConfig) if field_name == name)


@pytest.mark.parametrize("value", sorted(ALWAYS_RENDERED))
def test_an_always_rendered_setting_defaults_to_the_sidecars_default(value: str) -> None:
    """The chart renders these flags always; with the defaults it must ask for exactly what the sidecar would do
    without them, so a change of the sidecar's default shows up here."""
    chart_default = yaml.safe_load((CHART / "values.yaml").read_text())["sidecar"][value]
    assert chart_default == sidecar_default(SETTINGS[value])
    args = container(pod_spec(render()), "health")["args"]
    flag = "--" + SETTINGS[value].replace("_", "-")
    assert type(sidecar_default(SETTINGS[value]))(arg_value(args, flag)) == sidecar_default(SETTINGS[value])
