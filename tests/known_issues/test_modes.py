"""One list of cudagraph modes (vllm_rocm_known_issues.evaluator.MODES): every other statement of it is derived from
it or checked equal here, and vLLM's own released enum has exactly these names."""

from __future__ import annotations

import json
import re

from vllm_rocm_known_issues.evaluator import MODES
from vllm_rocm_qualify.config import DEFAULT_MODES

from tests.support.vllm_releases import REPO_ROOT, SUPPORTED_VERSIONS, release_tree

CHART = REPO_ROOT / "charts" / "vllm-rocm"


def test_the_schemas_and_the_chart_say_the_same_modes() -> None:
    values = json.loads((CHART / "values.schema.json").read_text())
    assert values["properties"]["compilation"]["properties"]["cudagraphMode"]["enum"] == [*MODES, ""]
    data = json.loads((REPO_ROOT / "known-issues" / "schema.json").read_text())
    assert data["definitions"]["mode"]["enum"] == list(MODES)
    tpl = (CHART / "templates" / "_qualification.tpl").read_text()
    (listed,) = re.findall(r'define "vllm-rocm\.modes" -}}(\[[^\]]*\])', tpl)
    assert json.loads(listed) == list(MODES)
    assert sorted(DEFAULT_MODES) == sorted(MODES)  # qualify's order, the same names


def test_vllm_releases_define_exactly_these_modes() -> None:
    """CUDAGraphMode in vllm/config/compilation.py of the newest supported release: the list is vLLM's, not ours."""
    newest = SUPPORTED_VERSIONS[-1]
    text = (release_tree(newest) / "vllm" / "config" / "compilation.py").read_text()
    body = text.split("class CUDAGraphMode", 1)[1].split("\n    def ", 1)[0]
    names = re.findall(r"^\s{4}([A-Z_]+)\s*=", body, re.M)
    assert sorted(names) == sorted(MODES), f"vLLM {newest}: {names}"
