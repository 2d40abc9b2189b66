"""`vllm-rocm qualification apply` (`vllm-rocm-health qualification apply` in the sidecar image): the deployment
gate for a qualification report (compose runs it before vLLM starts; vLLM starts only if it exits 0)."""

from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

from vllm_rocm_core.qualification import QualificationError, compilation_config, load

from .canary.baseline import Baseline, BaselineError
from .qualification_publish import add_publish_parsers

log = logging.getLogger(__name__)

# What apply writes into --out-dir; removed first so that a refused report never leaves an older result behind.
OUTPUTS = ("mode", "vllm.yaml", "baseline.json")


def add_qualification_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "qualification",
        help="use a qualification report (vllm-rocm qualify) in a deployment",
        description="A qualification report says which cudagraph modes gave right answers on a node and which "
        "one was fastest. `apply` refuses a mode the report did not pass, then writes the mode, a "
        "vLLM --config file carrying it, and the report's canary baseline. `publish` writes a report that "
        "qualifies what is deployed into the ConfigMap a Deployment mounts; `current` says whether the one there "
        "still does.",
    )
    sub = p.add_subparsers(dest="qualification_command", required=True)
    add_publish_parsers(sub)
    ap = sub.add_parser("apply", help="check a report and write the mode, vLLM config and baseline it gives")
    ap.add_argument("--report", type=Path, required=True, help="report JSON written by `vllm-rocm qualify run`")
    ap.add_argument(
        "--out-dir",
        type=Path,
        required=True,
        help=f"directory for {', '.join(OUTPUTS)} (vLLM: `--config OUT/vllm.yaml`; sidecar: "
        "`--canary-baseline OUT/baseline.json`)",
    )
    ap.add_argument(
        "--mode",
        default="",
        help="the cudagraph mode to deploy (default: the report's recommended "
        "mode); refused unless the report says it passed",
    )
    ap.add_argument(
        "--served-model-name",
        default="",
        help="the model name the deployment serves; refused if the report qualified another",
    )
    ap.set_defaults(func=_apply)


def _apply(args: argparse.Namespace) -> int:
    out: Path = args.out_dir
    out.mkdir(parents=True, exist_ok=True)
    for name in OUTPUTS:
        (out / name).unlink(missing_ok=True)
    try:
        report = load(args.report)
        report.check_served_model(args.served_model_name)
        mode = report.choose_mode(args.mode.strip().upper())
        if report.baseline is None:
            raise QualificationError(f"{args.report}: carries no canary baseline")
        (out / "baseline.json").write_text(json.dumps(report.baseline, indent=1) + "\n")
        Baseline.load(out / "baseline.json")  # the sidecar's own reader: refuse what it would refuse
    except (QualificationError, BaselineError) as e:
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)
        log.error("qualification refused: %s", e)
        return 1
    # A JSON string value: every vLLM release's --config reader passes it through as one argument.
    (out / "vllm.yaml").write_text("compilation-config: " + json.dumps(compilation_config(mode)) + "\n")
    (out / "mode").write_text(mode + "\n")
    row = report.row(mode) or {}
    print(
        f"qualified: cudagraph_mode {mode} for {report.served_model_name} (vLLM {report.vllm_version or '?'}), "
        f"effective {row.get('effective_mode', '?')}; wrote {', '.join(str(out / n) for n in OUTPUTS)}"
    )
    return 0
