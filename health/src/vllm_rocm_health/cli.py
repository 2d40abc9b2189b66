"""`vllm-rocm-health`: the health sidecar for vLLM on ROCm."""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import threading
from pathlib import Path

from . import config as cfgmod

DESCRIPTION = """\
Watches one vLLM server and tells Prometheus and Kubernetes whether it is really healthy:
CUDA-graph capture state from its log (requested vs effective cudagraph_mode, capture progress,
duration, memory, failures, downgrades), and an accuracy canary (known-answer problems, prompt
logprob fingerprint, mixed prefill+decode traffic, after-idle probe) compared with a baseline.

  serve             run the sidecar: /metrics, /healthz, /readyz
  parse FILE...     offline: what a vLLM log says, as JSON
  baseline record   take a canary baseline from a known-good server
  qualification apply   check a `vllm-rocm qualify` report and write what deployment takes from it
  qualification publish|current   write a checked report into the ConfigMap a Deployment mounts, or say whether
                    the one there still qualifies what is deployed (the chart's qualification Job)

Every serve flag has an environment variable VLLM_HEALTH_<FLAG> (e.g. VLLM_HEALTH_CANARY_INTERVAL).
"""


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": self.formatTime(record, "%Y-%m-%dT%H:%M:%S"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return json.dumps(out)


def setup_logging(fmt: str, level: str) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(
        _JsonFormatter() if fmt == "json" else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)
    # httpx logs every request at INFO: one line per /health poll would bury what matters.
    logging.getLogger("httpx").setLevel(max(logging.WARNING, logging.getLogger().level))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-rocm-health",
        description=DESCRIPTION,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser(
        "serve",
        help="run the sidecar",
        description=DESCRIPTION,
        allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    cfgmod.add_arguments(serve)
    serve.set_defaults(func=cmd_serve)
    parse = sub.add_parser("parse", help="summarise vLLM log files as JSON")
    parse.add_argument("files", nargs="+", type=Path, help="log files ('-' for stdin)")
    parse.add_argument("--requested-mode", default="", help="the mode asked for, if the log does not say")
    parse.add_argument(
        "--prefilter",
        choices=("auto", "hyperscan", "find"),
        default="auto",
        help="block scanner: hyperscan (one SIMD pass), find (stdlib fallback), auto: hyperscan if it "
        "loads (default: %(default)s)",
    )
    parse.set_defaults(func=cmd_parse)
    try:  # `baseline record` belongs to the canary package; the rest works without it
        from .canary.cli import add_baseline_parser
    except ImportError:
        logging.getLogger(__name__).debug("canary CLI not available: no `baseline` subcommand")
    else:
        add_baseline_parser(sub)
    from .qualification_cli import add_qualification_parser

    add_qualification_parser(sub)
    return parser


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        cfg = cfgmod.from_args(args)
    except ValueError as e:
        print(f"vllm-rocm-health: error: {e}", file=sys.stderr)
        return 2
    setup_logging(cfg.log_format, cfg.log_level)
    from .app import Sidecar
    from .canary.baseline import BaselineError

    # The handlers before the start: a SIGTERM that comes as soon as /healthz answers (a pod deleted while starting,
    # a test's stop) must still shut down cleanly, not kill the process mid-start.
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    try:
        sidecar = Sidecar(cfg)
        sidecar.start()
    except (BaselineError, OSError, RuntimeError) as e:
        logging.getLogger("vllm_rocm_health").error("cannot start: %s", e)
        return 1
    done.wait()
    sidecar.shutdown()
    # A canary run in flight has request threads of a ThreadPoolExecutor, which the interpreter joins at exit: a
    # SIGTERM would wait up to --canary-timeout for them (a pod's grace period, a test's patience). Everything that
    # must end cleanly has ended above; the connections close with the process.
    logging.shutdown()
    os._exit(0)


def cmd_parse(args: argparse.Namespace) -> int:
    from .prefilter import make_scanner
    from .state import LogState

    try:
        scan = make_scanner(args.prefilter)
    except Exception as e:  # --prefilter hyperscan without a loadable wheel
        print(f"vllm-rocm-health parse: --prefilter {args.prefilter}: {e}", file=sys.stderr)
        return 2
    rc = 0
    for path in args.files:
        state = LogState(requested_hint=args.requested_mode)
        lines = 0
        try:
            stream = sys.stdin.buffer if str(path) == "-" else open(path, "rb")  # noqa: SIM115
        except OSError as e:
            print(f"vllm-rocm-health parse: {path}: {e.strerror}", file=sys.stderr)
            rc = 1
            continue
        with stream:
            # Whole blocks through the prefilter; only the lines that can matter are parsed one by one. The
            # block is completed to a line end with readline(): one copy per block, no tail juggling.
            while block := stream.read(1 << 22):
                if not block.endswith(b"\n"):
                    block += stream.readline()
                lines += state.feed_block(block, scan)
        print(json.dumps({"file": str(path), "lines": lines, **state.summary()}))
    return rc


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
