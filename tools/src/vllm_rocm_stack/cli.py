"""`vllm-rocm-stack`: the local stack behind `make run`."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
from pathlib import Path

from .config import REPO, StackConfig

DESCRIPTION = """\
Run the distribution's whole stack on one machine.

  cpu   (default) a real vLLM CPU build serving a small offline model, the health sidecar following its
        log and API (capture state + accuracy canary), Prometheus scraping both with the shipped alert
        rules, and Alertmanager routing the alerts (docker/alertmanager/alertmanager.yml) to a webhook
        receiver the stack runs: each notification is a line in WORKDIR/notifications.jsonl.
        Needs no GPU and no network. Set up first with `make setup-vllm` (make run does it).
  rocm  on a real AMD GPU node: `docker compose -f docker/compose.yaml up` with the ROCm images (add an
        accuracy overlay with --compose-file, see docker/README.md).

Select with --target or VLLM_ROCM_STACK_TARGET. Stops everything cleanly on Ctrl-C.

`vllm-rocm qualify run` finds the fastest cudagraph mode that still answers right (`vllm-rocm-stack qualify` is
its deprecated old name).
"""
USAGE_NOTE = """\
Run it as `make run` (sets up the vLLM CPU build first), with options in RUN_ARGS, e.g.
  make run RUN_ARGS="--vllm-port 8001 --canary-interval 30"
or, once set up, directly: .work/venv/bin/vllm-rocm-stack run --vllm-port 8001
"""


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    for f in dataclasses.fields(StackConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default
        helptext = f.metadata.get("help", "")
        if isinstance(default, bool):
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=helptext)
        else:
            kind = Path if f.name in ("workdir", "model", "baseline") else type(default)
            parser.add_argument(
                flag, type=kind, default=default, help=f"{helptext} (default: {'empty' if default == '' else default})"
            )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-rocm-stack", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    # Only stdlib imports (and .config) on the --help path: `make run RUN_ARGS=--help` needs no setup.
    run = sub.add_parser(
        "run",
        help="start the stack and keep it running until Ctrl-C",
        usage='make run RUN_ARGS="[options]"',
        description=DESCRIPTION,
        epilog=USAGE_NOTE,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "--target",
        choices=("cpu", "rocm"),
        default=os.environ.get("VLLM_ROCM_STACK_TARGET", "cpu"),
        help="cpu: local CPU stack (default); rocm: docker compose on an AMD node",
    )
    run.add_argument(
        "--compose-file",
        type=Path,
        action="append",
        default=None,
        help="compose file for --target rocm, repeatable: docker/compose.yaml and one accuracy overlay "
        "(compose.baseline.yaml, compose.qualified.yaml or compose.no-canary.yaml; without one the "
        "sidecar refuses to start, see docker/README.md). Default: docker/compose.yaml",
    )
    run.add_argument(
        "--profile",
        action="append",
        default=["monitoring"],
        help="compose profiles for --target rocm (default: monitoring)",
    )
    _add_config_flags(run)
    from vllm_rocm_qualify.cli import add_qualify_parser

    add_qualify_parser(sub)  # the deprecated old name of `vllm-rocm qualify`
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Ctrl-C must stop what `run` and `qualify` start even when the parent left SIGINT ignored (a shell's background
    # job, nohup): Python then installs no KeyboardInterrupt handler of its own.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if getattr(args, "qualify_command", None):  # (qualify run has its own --command: the server template)
        from vllm_rocm_qualify.cli import dispatch
        from vllm_rocm_qualify.command import deprecated

        return deprecated("vllm-rocm-stack qualify", "vllm-rocm qualify", lambda: dispatch(args))
    from .stack import run_compose, run_stack  # late: keeps --help instant

    if args.target == "rocm":
        return run_compose(args.compose_file or [REPO / "docker" / "compose.yaml"], args.profile)
    cfg = StackConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(StackConfig)})
    return run_stack(cfg)


if __name__ == "__main__":
    sys.exit(main())
