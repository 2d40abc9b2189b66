"""`vllm-rocm qualify`: run, replay and show qualifications."""

from __future__ import annotations

import argparse
import dataclasses
import signal
import sys
import time
import typing
from pathlib import Path

from .config import QualifyConfig

DESCRIPTION = """\
Which cudagraph_mode is the fastest that still gives right answers on this node, with this image and model?

`run` starts the vLLM under test once per mode (default: all five), same model and flags, from --command.
For each mode it reads the server's log with the health sidecar's parser (requested vs effective mode,
downgrades, graphs captured, capture seconds and GiB, failures), then compares its greedy answers token for
token with the reference run (cudagraph_mode NONE, or --enforce-eager) under batch shapes that drive each graph
family: single requests of each capture size alone, bursts of concurrent short decodes, long prefills in flight
with decodes, the first request after ready and after idle. It runs the accuracy canary against a baseline
taken from the reference, and measures decode throughput (output tok/s at each --concurrency, fixed lengths).

Writes a JSON report (deployment takes it: `helm --set-file qualification=report.json`, or docker/compose's
qualified overlay), the reference's canary baseline, and each server's log; prints a table and the
recommendation: the fastest mode that passed.

Verdicts: pass; fail (answers differ from the reference beyond bf16 ties, or the canary failed); error (did
not start, crashed, requests failed: nothing was proven). Exit status: 0, or 1 when a --require mode did not
pass (without --require: when no mode passed); 2 for bad arguments; 130 when interrupted (every server it
started is stopped; the report keeps the finished modes, and --resume continues).

  vllm-rocm qualify run --model /models/Qwen3-8B --require FULL_AND_PIECEWISE   # `vllm serve` from PATH
  vllm-rocm qualify run --command 'docker run --rm --device /dev/kfd --device /dev/dri -p {port}:8000 \\
      -v /models:/models IMAGE {model} --port 8000 {mode_args}' --model /models/Qwen3-8B
  vllm-rocm qualify show vllm-rocm-qualify/report.json
  vllm-rocm qualify replay --report R.json --logs DIR     # re-derive a report from its recorded logs
  make qualify                                            # this repository's CPU build (modes become NONE there)
"""


def _flag_type(f: dataclasses.Field, hints: dict[str, typing.Any]) -> typing.Any:
    if "list" in f.metadata:
        item = f.metadata["list"]

        def parse(text: str) -> list:
            try:
                return [item(x.strip().upper() if item is str else x.strip()) for x in text.split(",") if x.strip()]
            except ValueError as e:
                raise argparse.ArgumentTypeError(f"expected a comma-separated list: {e}") from e

        return parse
    hint = hints[f.name]
    if hint in (Path, Path | None):
        return Path
    return {int: int, float: float, str: str}[hint]


def add_run_flags(parser: argparse.ArgumentParser) -> None:
    hints = typing.get_type_hints(QualifyConfig)
    for f in dataclasses.fields(QualifyConfig):
        flag = "--" + f.name.replace("_", "-")
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        help_text = f.metadata["help"]
        if hints[f.name] is bool:
            parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default, help=help_text)
        elif f.metadata.get("repeat"):
            parser.add_argument(flag, action="append", default=[], metavar="VALUE", help=help_text)
        else:
            shown = ",".join(map(str, default)) if isinstance(default, list) else default
            parser.add_argument(
                flag,
                type=_flag_type(f, hints),
                default=default,
                choices=f.metadata.get("choices"),
                help=f"{help_text} (default: {shown if shown not in ('', None) else 'none'})",
            )


def add_qualify_parser(subparsers: argparse._SubParsersAction) -> None:
    q = subparsers.add_parser(
        "qualify",
        help="find the fastest correct cudagraph mode on this node",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_subcommands(q)


def build_parser(prog: str = "vllm-rocm qualify") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog, description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    _add_subcommands(parser)
    return parser


def _add_subcommands(q: argparse.ArgumentParser) -> None:
    sub = q.add_subparsers(dest="qualify_command", required=True)
    run = sub.add_parser(
        "run",
        help="qualify modes: start, compare, measure, report",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_run_flags(run)
    show = sub.add_parser("show", help="print the table of a report")
    show.add_argument("report", type=Path)
    show.add_argument(
        "--require", action="append", default=[], metavar="MODE", help="exit 1 unless this mode passed (repeatable)"
    )
    rp = sub.add_parser("replay", help="re-derive a report's log columns and verdicts from its recorded logs")
    rp.add_argument("--report", type=Path, required=True)
    rp.add_argument("--logs", type=Path, required=True, help="directory holding the report's <label>.log files")


def _say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


def _exit_code(report: dict, require: list[str]) -> int:
    rows = {r["mode"]: r for r in report["rows"]}
    if require:
        bad = [m for m in require if rows.get(m, {}).get("verdict") != "pass"]
        for m in bad:
            _say(f"required mode {m} did not pass: {rows.get(m, {}).get('verdict_reason') or 'not in the report'}")
        return 1 if bad else 0
    return 0 if report.get("recommended") else 1


def main(argv: list[str] | None = None) -> int:
    """`vllm-rocm qualify ...` and `python -m vllm_rocm_qualify ...`."""
    import logging

    args = build_parser().parse_args(argv)
    # Ctrl-C must stop the servers it starts even when the parent left SIGINT ignored (a shell's background job,
    # nohup): Python then installs no KeyboardInterrupt handler of its own.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return dispatch(args)


def dispatch(args: argparse.Namespace) -> int:
    from . import report as rep

    if args.qualify_command == "show":
        from vllm_rocm_core.qualification import QualificationError, load

        try:
            raw = load(args.report).raw
        except QualificationError as e:
            _say(f"qualify show: {e}")
            return 2
        print(rep.table(raw))
        return _exit_code(raw, [m.upper() for m in args.require])
    if args.qualify_command == "replay":
        from .replay import replay

        again, diffs = replay(args.report, args.logs)
        print(rep.table(again))
        for d in diffs:
            _say(f"differs: {d}")
        return 1 if diffs else 0
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    import logging

    from . import report as rep
    from .runner import Qualification

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request would bury the progress
    cfg = QualifyConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(QualifyConfig)})
    cfg.require = [m.upper() for m in cfg.require]
    try:
        q = Qualification(cfg, _say)
    except ValueError as e:
        _say(f"qualify: {e}")
        return 2

    def on_term(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt  # SIGTERM stops the servers the same way as Ctrl-C

    signal.signal(signal.SIGTERM, on_term)
    try:
        report = q.run()
    except KeyboardInterrupt:
        q.stop_servers()
        _say(f"interrupted; partial report: {cfg.report_path}")
        return 130
    except ValueError as e:  # --resume against another run's report
        _say(f"qualify: {e}")
        return 2
    print(rep.table(report))
    _say(f"report: {cfg.report_path}; baseline: {cfg.workdir / 'baseline.json'}; logs: {cfg.workdir / 'logs'}")
    return _exit_code(report, cfg.require)
