"""The chart's sidecar settings carry the sidecar's own ranges: values.schema.json refuses what the sidecar would
refuse at start, each value reaches its flag, and 0 (the sidecar's default) renders no flag. The ranges are read
from the sidecar's configuration dataclasses, so a change on either side fails here."""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from vllm_rocm_health.config import SidecarConfig, _fields

sys.path.insert(0, str(Path(__file__).resolve().parent))
from helm_chart import CHART, arg_value, container, pod_spec, render, render_error  # noqa: E402

# chart value (sidecar.<name>) -> sidecar setting; those listed in "vllm-rocm.sidecarFlags" may be 0 = default.
SETTINGS = {"canaryInterval": "canary_interval", "canaryTimeout": "canary_timeout",
            "canaryMaxAgeIntervals": "canary_max_age_intervals", "canaryMaxTokens": "canary_max_tokens",
            "healthInterval": "health_interval"}
ALWAYS_RENDERED = {"canaryInterval"}


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
    if value not in ALWAYS_RENDERED:
        assert {"const": 0} in s["anyOf"]
    assert s["type"] == ("integer" if tp is int else "number")


@pytest.mark.parametrize("value", sorted(SETTINGS))
def test_each_value_reaches_its_flag_and_out_of_range_is_refused(value: str) -> None:
    lo, hi, tp = sidecar_range(SETTINGS[value])
    flag = "--" + SETTINGS[value].replace("_", "-")
    args = container(pod_spec(render({f"sidecar.{value}": hi})), "health")["args"]
    assert float(arg_value(args, flag)) == hi
    for bad in (hi * 10, lo - (1 if tp is int else lo / 2), -1):
        if bad == 0 and value not in ALWAYS_RENDERED:
            continue
        err = render_error({f"sidecar.{value}": bad})
        assert f"sidecar.{value}" in err or "sidecar" in err, err
    if value not in ALWAYS_RENDERED:
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
