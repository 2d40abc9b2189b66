"""`vllm-rocm-health baseline record`: take a canary baseline from a known-good server."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from pathlib import Path

from .config import CanaryConfig
from .runner import record_baseline

log = logging.getLogger(__name__)
_DEFAULTS = CanaryConfig()


def add_baseline_parser(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "baseline",
        help="record a canary baseline",
        description="Canary baselines are taken explicitly, from a server known to be right, for one model and "
        "configuration (dtype, eager or compiled: logprobs differ between them). The sidecar never "
        "re-takes one by itself.",
    )
    sub = p.add_subparsers(dest="baseline_command", required=True)
    rec = sub.add_parser("record", help="ask a known-good server the canary's questions and store its answers")
    rec.add_argument("--out", type=Path, required=True, help="baseline JSON to write")
    rec.add_argument("--vllm-url", default="http://127.0.0.1:8000", help="the known-good vLLM server")
    rec.add_argument("--model", default=None, help="served model name (default: the first of /v1/models)")
    rec.add_argument("--notes", default="", help="free text stored in the baseline (e.g. image, mode, dtype)")
    rec.add_argument("--force", action="store_true", help="overwrite an existing baseline file")
    for name in ("seed", "num_problems", "fresh_problems", "max_tokens", "timeout"):
        default = getattr(_DEFAULTS, name)
        f = next(f for f in dataclasses.fields(CanaryConfig) if f.name == name)
        rec.add_argument(
            "--" + name.replace("_", "-"),
            type=type(default),
            default=default,
            help=f"{f.metadata['help']} (default: {default})",
        )
    rec.set_defaults(func=_record)


def _record(args: argparse.Namespace) -> int:
    if args.out.exists() and not args.force:
        log.error("%s exists; pass --force to replace it", args.out)
        return 2
    cfg = CanaryConfig(
        seed=args.seed,
        num_problems=args.num_problems,
        fresh_problems=args.fresh_problems,
        max_tokens=args.max_tokens,
        timeout=args.timeout,
    )
    from .client import CanaryError

    try:
        base = record_baseline(cfg, args.vllm_url, args.model, notes=args.notes)
    except CanaryError as e:
        log.error("could not record a baseline from %s: %s", args.vllm_url, e)
        return 1
    base.save(args.out)
    print(
        f"baseline written to {args.out}: model {base.model}, score {base.score:.2f} "
        f"({base.num_problems} problems, seed {base.seed}), {len(base.fingerprints)} fingerprint texts"
    )
    return 0
