"""Qualification reports: which cudagraph modes gave right answers, and how fast, on one node.

`vllm-rocm qualify run` writes them; deployment reads them here (compose's gate container through
`vllm-rocm-health qualification apply`; the Helm chart's templates/_qualification.tpl mirrors `choose_mode`).
Reading is strict: a report that is malformed, names no mode, or says the chosen mode did not pass is refused
with a reason, never taken as a pass.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_rocm_known_issues.evaluator import MODES

FORMAT = 1
KIND = "vllm-rocm-qualification"
VERDICTS = ("pass", "fail", "error")


class QualificationError(Exception):
    """The report cannot be used, or it refuses the mode asked for."""


# A Kubernetes label value: the GPU product is the node label amd.com/gpu.product-name (AMD's node labeller), e.g.
# AMD_Instinct_MI300X_OAM, and a Job or Deployment selects nodes by it.
_LABEL_VALUE = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")


def gpu_product_name(name: str, flag: str = "--gpu-product") -> str:
    """`name` when it can be a value of the node label amd.com/gpu.product-name; else refuse, naming `flag`. A
    product that no node label can carry would never match a node, and is a typo to say at once."""
    if not _LABEL_VALUE.fullmatch(name):
        raise QualificationError(
            f"{flag} {name[:80]!r}: not a GPU product name as the node label amd.com/gpu.product-name carries it "
            "(e.g. AMD_Instinct_MI300X_OAM: letters, digits, '-', '_', '.', at most 63)"
        )
    return name


def compilation_config(mode: str) -> str:
    """How the distribution's Python tells vLLM a cudagraph mode: the value of `--compilation-config` (a JSON
    object every supported release reads; qualify's servers and the compose gate's vllm.yaml both use this)."""
    if mode not in MODES:
        raise QualificationError(f"{mode!r} is not a cudagraph mode ({', '.join(MODES)})")
    return json.dumps({"cudagraph_mode": mode})


@dataclass(frozen=True)
class Report:
    raw: dict[str, Any]

    @property
    def rows(self) -> list[dict[str, Any]]:
        return self.raw["rows"]

    @property
    def recommended(self) -> str | None:
        return self.raw.get("recommended")

    @property
    def served_model_name(self) -> str:
        return str(self.raw.get("served_model_name", ""))

    @property
    def vllm_version(self) -> str:
        return str(self.raw.get("vllm_version", ""))

    @property
    def gpu_product(self) -> str:
        """The GPU product the report measured (`qualify run --gpu-product`, the node label
        amd.com/gpu.product-name); "" when the report does not say (reports from before the flag)."""
        return str(self.raw.get("gpu_product", ""))

    @property
    def baseline(self) -> dict[str, Any] | None:
        return self.raw.get("baseline")

    def row(self, mode: str) -> dict[str, Any] | None:
        return next((r for r in self.rows if r["mode"] == mode), None)

    def choose_mode(self, mode: str = "") -> str:
        """`mode` if the report says it passed, or the recommended mode when `mode` is empty; else refuse."""
        if not mode:
            if not self.recommended:
                raise QualificationError(
                    "the report recommends no mode: none passed ("
                    + "; ".join(f"{r['mode']}: {r['verdict']}" for r in self.rows)
                    + ")"
                )
            mode = self.recommended
        if mode not in MODES:
            raise QualificationError(f"{mode!r} is not a cudagraph_mode ({', '.join(MODES)})")
        row = self.row(mode)
        if row is None:
            raise QualificationError(
                f"cudagraph_mode {mode} was not qualified: the report covers " + ", ".join(r["mode"] for r in self.rows)
            )
        if row["verdict"] != "pass":
            raise QualificationError(
                f"cudagraph_mode {mode} {'failed' if row['verdict'] == 'fail' else 'errored'} "
                f"qualification: {row.get('verdict_reason') or 'no reason recorded'}"
            )
        return mode

    def check_release(self, vllm_version: str) -> None:
        """A result belongs to the release it measured: the vLLM that runs (as its own log prints it, the same line
        qualify read) must be the report's. An unknown running version is refused too (never assumed equal)."""
        if not vllm_version:
            raise QualificationError(
                f"the running vLLM's version is not known yet (its version line was not read); the report "
                f"qualified vLLM {self.vllm_version}"
            )
        if vllm_version != self.vllm_version:
            raise QualificationError(
                f"the report was measured on vLLM {self.vllm_version}, vLLM {vllm_version} runs; qualify the image "
                "you deploy"
            )

    def check_served_model(self, served_model_name: str) -> None:
        if served_model_name and self.served_model_name != served_model_name:
            raise QualificationError(
                f"the report qualified model {self.served_model_name!r}, this deployment "
                f"serves {served_model_name!r}: qualify this model"
            )

    def check_gpu_product(self, product: str) -> None:
        """A result belongs to the GPU it measured: graph capture and kernels differ between products, so a report
        for another one (or one that does not say, where the deployment names its product) is refused. Neither
        naming one is accepted: a report and a deployment from before GPU products were recorded."""
        if self.gpu_product and product and self.gpu_product != product:
            raise QualificationError(
                f"the report qualified GPU product {self.gpu_product}, this deployment runs on {product}: qualify on "
                "this GPU product"
            )
        if product and not self.gpu_product:
            raise QualificationError(
                f"the report does not say which GPU product it measured; qualify with --gpu-product {product}"
            )
        if self.gpu_product and not product:
            raise QualificationError(
                f"the report qualified GPU product {self.gpu_product}; this deployment's product is not known: "
                "give --gpu-product"
            )


def validate(raw: Any, source: str = "report", deployable: bool = True) -> Report:
    """The structure deployment relies on; everything else in the report is for people. `deployable=False` is for
    the writer: a run whose reference never started still gets its report, which deployment then refuses."""
    if not isinstance(raw, dict):
        raise QualificationError(f"{source}: not a JSON object")
    # type() is int: `true` equals 1 in Python, and a JSON boolean is no format number.
    if raw.get("kind") != KIND or type(raw.get("format")) is not int or raw.get("format") != FORMAT:
        raise QualificationError(
            f"{source}: not a qualification report of format {FORMAT} "
            f"(kind {raw.get('kind')!r}, format {raw.get('format')!r})"
        )
    for key in ("vllm_version", "served_model_name") if deployable else ():
        # A result belongs to the release and model it measured: a report that does not say which is no proof.
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise QualificationError(f"{source}: {key} is missing: the report must say what it qualified")
    if "gpu_product" in raw and not (isinstance(raw["gpu_product"], str) and raw["gpu_product"].strip()):
        raise QualificationError(f"{source}: gpu_product {str(raw['gpu_product'])[:80]!r} is not a GPU product name")
    rows = raw.get("rows")
    if not isinstance(rows, list) or not rows:
        raise QualificationError(f"{source}: no rows")
    seen = set()
    for i, row in enumerate(rows):
        if not isinstance(row, dict) or row.get("mode") not in MODES or row.get("verdict") not in VERDICTS:
            raise QualificationError(
                f"{source}: row {i} needs a mode ({', '.join(MODES)}) and a verdict ({', '.join(VERDICTS)})"
            )
        if row["mode"] in seen:
            raise QualificationError(f"{source}: mode {row['mode']} appears twice")
        seen.add(row["mode"])
    rec = raw.get("recommended")
    if rec is not None and not isinstance(rec, str):
        raise QualificationError(f"{source}: recommended {str(rec)[:80]} is not a mode name")
    if rec is not None:
        row = next(r for r in rows if r["mode"] == rec) if rec in seen else None
        if row is None or row["verdict"] != "pass":
            raise QualificationError(f"{source}: recommends {rec!r}, which is not a passing row")
    base = raw.get("baseline")
    if base is not None and not (
        isinstance(base, dict) and isinstance(base.get("answers"), list) and isinstance(base.get("fingerprints"), list)
    ):
        raise QualificationError(f"{source}: baseline is not a canary baseline")
    return Report(raw)


def load(path: Path) -> Report:
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError as e:
        raise QualificationError(f"{path}: not found") from e
    except (OSError, ValueError) as e:
        raise QualificationError(f"{path}: unreadable: {e}") from e
    return validate(raw, str(path))
