"""Command line: `vllm-rocm-patches [--series-dir DIR] COMMAND ...`, as fixed in docs/contracts.md."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from vllm_rocm_known_issues import evaluator as known_issues

from . import __version__, engine, series, target
from .errors import EXIT_FAILED, EXIT_OK, EXIT_USAGE, PatchToolError, SeriesError, TargetNotFound, UsageError

log = logging.getLogger("vllm_rocm_patches")

DESCRIPTION = """\
Apply the vLLM ROCm patch series to an installed vLLM, exactly and atomically.

The series (one directory per supported vLLM release under patches/) backports small upstream fixes of
known CUDA-graph and ROCm correctness issues (known-issues/known-issues.json says which patch fixes which
issue). `status` also lists every known issue of the target's release: fixed by the series, fixed upstream,
or unmitigated (with what to do instead). vLLM is located without importing it: give a
site-packages directory (or an unpacked wheel root) as TARGET, or --python PYEXE to use the directory
that interpreter would import vllm from. The release is read from the vllm dist-info METADATA and
vllm/_version.py, and every target file must have the sha256 recorded for that release before anything
is changed. The files themselves are matched against every release of the series too (a second opinion
shown by `status`); a release the series does not know is judged by what its file declares.

TARGET may also be a vLLM SOURCE tree (an unpacked sdist or a checkout: a directory with vllm/ but no
vllm-*.dist-info/), as a source-build Dockerfile patches before building; name its release with
--release X.Y.Z (it must agree with PKG-INFO / vllm/_version.py when those give a final release).

commands:
  status TARGET [--json]             per patch: applicable / applied / fixed upstream / not needed / conflict;
                                     for a release without a series: what its file declares (not needed,
                                     fixed upstream, affected, or unknown when the file does not say);
                                     per known issue of the release: fixed by the series / fixed upstream /
                                     unmitigated
  apply  TARGET [--report F] [--dry-run]
                                     apply what is applicable (no fuzz; all files or none; idempotent)
  verify TARGET [--report F]         check the post-conditions on disk (parsed with ast) and the RECORD
  revert TARGET                      restore the released files
  list                               the releases and patches the series holds
  known-issues [CONFIG] [--json]     the known issues (all, or those a configuration hits; exit 1 when a
                                     verified wrong_tokens / crash issue applies unmitigated)

exit codes: 0 success (also: nothing to do), 1 conflict / hash mismatch / post-condition failed,
2 bad usage or TARGET not found.
"""


def _add_target(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "target",
        nargs="?",
        metavar="TARGET",
        help="site-packages directory or unpacked wheel root holding vllm/ and vllm-*.dist-info/",
    )
    p.add_argument(
        "--python",
        metavar="PYEXE",
        help="use the vllm/ this interpreter would import instead of TARGET (vLLM is not imported)",
    )
    p.add_argument(
        "--release",
        metavar="X.Y.Z",
        help="the vLLM release of TARGET; needed for a source tree (vllm/ without a dist-info)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="vllm-rocm-patches",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    parser.add_argument(
        "--series-dir",
        type=Path,
        default=None,
        help=f"the series directory (default: env {series.ENV_SERIES_DIR}, else the one this package was installed or "
        "checked out with)",
    )
    parser.add_argument(
        "--known-issues",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"the known-issues data (default: env {known_issues.ENV_DATA}, else known-issues/known-issues.json "
        "next to the series dir, else the one this package was installed or checked out with)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument("-q", "--quiet", action="store_true", help="only warnings and errors on stderr")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    p = sub.add_parser("status", help="what each patch's state is on TARGET")
    _add_target(p)
    p.add_argument("--json", action="store_true", help="print the machine-readable report instead")
    p = sub.add_parser("apply", help="apply the series to TARGET")
    _add_target(p)
    p.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report to FILE")
    p.add_argument("--dry-run", action="store_true", help="check everything, write nothing")
    p = sub.add_parser("verify", help="check the post-conditions on TARGET")
    _add_target(p)
    p.add_argument("--report", type=Path, metavar="FILE", help="write the JSON report to FILE")
    p = sub.add_parser("revert", help="restore TARGET's released files")
    _add_target(p)
    sub.add_parser("list", help="list the releases and patches in the series")
    _add_known_issues_parser(sub)
    return parser


def _add_known_issues_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "known-issues",
        help="list the known issues, or judge one vLLM configuration against them",
        description="Without configuration options: every known issue. With any of them: which issues apply to that"
        " configuration (an option left out is unknown: such issues are reported as `possible`). Exit 1 when a"
        " verified wrong_tokens / crash issue applies and neither a patch nor --allow mitigates it (what the Helm"
        " chart refuses).",
    )
    p.add_argument("--release", help="vLLM release, e.g. 0.10.2 or 0.10.2+rocm700")
    p.add_argument("--rocm", help="ROCm version of the image, e.g. 7.0.0")
    p.add_argument("--arch", help="GPU architecture, e.g. gfx942 or gfx950")
    p.add_argument(
        "--backend",
        help="the attention backend vLLM runs, in any release's spelling (ROCM_AITER_FA,"
        " TRITON_ATTN_VLLM_V1, 'Using Triton Attention backend on V1 engine.', ...); without it, vLLM's"
        " automatic choice is inferred from --release, --arch and --env as the Helm chart infers it",
    )
    p.add_argument("--architecture", help="the model's architecture class as vLLM resolves it, e.g. LlamaForCausalLM")
    p.add_argument(
        "--env",
        action="append",
        default=None,
        metavar="NAME=VALUE",
        help="a VLLM_* variable of the server (repeat; unset ones take vLLM's default); give"
        " --env '' for an environment that sets none",
    )
    p.add_argument("--kv-cache-dtype", help="auto, fp8, fp8_e4m3, ...")
    p.add_argument("--quantization", help="--quantization of the server ('none' = unquantized)")
    p.add_argument("--speculative-method", help="speculative_config.method ('none' = no speculative decoding)")
    p.add_argument("--tensor-parallel-size", type=int)
    p.add_argument("--max-num-seqs", type=int)
    p.add_argument("--mode", help="cudagraph_mode vLLM runs (default: the release's default when --release is given)")
    p.add_argument(
        "--patch",
        action="append",
        default=[],
        metavar="ID",
        help="an applied patch, vllm-<release>/<file>.patch (repeat)",
    )
    p.add_argument("--allow", action="append", default=[], metavar="ID", help="an issue id accepted knowingly")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--markdown", action="store_true", help="print the README table")
    p.add_argument("--write-readme", type=Path, metavar="FILE", help="replace the table block in FILE")


def _human(rep: engine.Report) -> str:
    t = rep.target
    if t.kind == "source":
        where = " (source tree)"
    elif t.distribution.lower() != "vllm":
        where = f" (installed as {t.distribution})"
    else:
        where = ""
    head = f"vLLM {t.version} at {t.root}{where}"
    if rep.known:
        head += f" -- series {rep.series_id} (sha256 {rep.series_sha256[:12]})"
    else:
        head += " -- no series for this release; judged by what its files declare"
    lines = [head]
    if rep.known and rep.series_id != f"vllm-{t.release}":
        lines.append(f"  series {rep.series_id} {rep.series_why}")
    if rep.content_matches:
        lines.append(f"  files match: {', '.join(rep.content_matches)}")
    else:
        lines.append("  files match: no release file of the series")
    for e in rep.entries:
        lines.append(f"  {e.id}: {e.state.replace('-', ' ')}" + (f" [{e.action}]" if e.action != "none" else ""))
        lines.append(f"      {e.message}")
        for c in e.postconditions:
            # before apply the post-conditions are expected not to hold yet: say "todo", not "FAIL"
            mark = "ok  " if c.ok else "todo" if e.state == engine.APPLICABLE else "FAIL"
            lines.append(f"      {mark} {c.description} (found {c.found})")
    for note in rep.record_notes:
        lines.append(f"  {note}")
    lines.extend(_known_issue_lines(rep))
    lines.append(rep.summary or ("ok" if rep.exit_code == EXIT_OK else "failed"))
    return "\n".join(lines)


_KI_ORDER = {"unmitigated": 0, "fixed-by-series": 1, "fixed-upstream": 2}


def _known_issue_lines(rep: engine.Report) -> list[str]:
    rows = sorted((k for k in rep.known_issues if k["state"] != "not-affected"), key=lambda k: _KI_ORDER[k["state"]])
    if not rep.known_issues:
        return []
    lines = [f"  known issues of vLLM {rep.target.release} ({rep.known_issues_source}):"]
    for k in rows:
        tag = k["symptom"] + ("" if k["verified"] else ", unverified")
        if k["state"] == "fixed-by-series":
            what = f"fixed by the series: {k['patch'].split('/', 1)[1]} ({k['patch_state'].replace('-', ' ')})"
        elif k["state"] == "fixed-upstream":
            what = f"fixed upstream in {k['first_release']}"
        else:
            what = f"UNMITIGATED when {k['conditions']}. {k['advice']}"
        lines.append(f"    {k['id']} [{tag}]: {what}")
    rest = len(rep.known_issues) - len(rows)
    if rest:
        lines.append(f"    ({rest} more do not affect vLLM {rep.target.release})")
    return lines


def _attach_known_issues(rep: engine.Report, path: Path | None, series_dir: Path) -> None:
    """Judge the known-issues data for the target's release (the series' patch states mitigate)."""
    try:
        data = known_issues.load(path, series_dir)
        rep.known_issues = known_issues.release_report(data, rep.target.version, rep.patch_states())
    except known_issues.KnownIssuesError as exc:
        raise SeriesError(str(exc)) from None
    rep.known_issues_source = str(data.path)


_CONFIG_OPTIONS = (
    "release",
    "rocm",
    "arch",
    "backend",
    "architecture",
    "env",
    "kv_cache_dtype",
    "quantization",
    "speculative_method",
    "tensor_parallel_size",
    "max_num_seqs",
    "mode",
)


def _known_issues_command(args: argparse.Namespace, data: known_issues.KnownIssues) -> int:
    if args.write_readme:
        try:
            text = args.write_readme.read_text(encoding="utf-8")
            args.write_readme.write_text(
                known_issues.replace_readme_block(text, known_issues.markdown_table(data)), encoding="utf-8"
            )
        except (OSError, known_issues.KnownIssuesError) as exc:
            raise UsageError(f"cannot update {args.write_readme}: {exc}") from None
        log.info("wrote the known-issues table into %s", args.write_readme)
        return EXIT_OK
    if args.markdown:
        print(known_issues.markdown_table(data), end="")
        return EXIT_OK
    if not any(getattr(args, o) is not None for o in _CONFIG_OPTIONS):
        rows = [
            {
                "id": i.id,
                "title": i.title,
                "symptom": i.symptom,
                "verified": i.verified,
                "vllm": i.affects["vllm"],
                "conditions": known_issues.describe_conditions(i),
                "advice": i.advice(),
            }
            for i in data.issues
        ]
        if args.json:
            print(json.dumps(rows, indent=2))
        else:
            for r in rows:
                print(
                    f"{r['id']} [{r['symptom']}{'' if r['verified'] else ', unverified'}] vLLM {r['vllm']}:"
                    f" {r['conditions']}"
                )
        return EXIT_OK
    env = None
    if args.env is not None:
        env = {}
        for item in (e for e in args.env if e):
            name, sep, value = item.partition("=")
            if not sep or not name:
                raise UsageError(f"--env {item!r}: expected NAME=VALUE")
            env[name] = value
    try:
        mode = args.mode or (known_issues.default_mode(args.release) if args.release else None)
        backend: str | None
        if args.backend is not None:
            backend, how = known_issues.canonical_attention_backend(args.backend), "given"
        else:
            backend = known_issues.infer_attention_backend(args.release, arch=args.arch, env=env)
            how = "inferred: vLLM's automatic choice" if backend else "unknown: give --backend, or --release and --env"
        cfg = known_issues.Config(
            release=args.release,
            rocm=args.rocm,
            arch=args.arch,
            attention_backend=backend,
            env=env,
            kv_cache_dtype=args.kv_cache_dtype,
            quantization=args.quantization,
            speculative_method=args.speculative_method,
            tensor_parallel_size=args.tensor_parallel_size,
            max_num_seqs=args.max_num_seqs,
            mode=mode,
            patches=frozenset(args.patch),
            architecture=args.architecture,
        )
        matches = [m for m in data.evaluate(cfg) if m.status != known_issues.NO]
        blocking = {m.issue.id for m in data.blocking(cfg, args.allow)}
    except known_issues.KnownIssuesError as exc:
        raise UsageError(str(exc)) from None
    if args.json:
        print(
            json.dumps(
                {
                    "attention_backend": {"name": backend, "how": how},
                    "matches": [dict(m.to_json(), blocking=m.issue.id in blocking) for m in matches],
                    "blocking": sorted(blocking),
                },
                indent=2,
            )
        )
    else:
        print(f"attention backend: {backend or '-'} ({how})")
        for m in matches:
            state = (
                "BLOCKS"
                if m.issue.id in blocking
                else m.status + (f", mitigated by {m.mitigated_by}" if m.mitigated else "")
            )
            unknown = f" (unknown: {', '.join(m.unknown)})" if m.unknown else ""
            if m.scope in (known_issues.OUTSIDE, known_issues.UNDECIDED):
                unknown += (
                    " (outside the configurations the reports cover)"
                    if m.scope == known_issues.OUTSIDE
                    else " (the reports' scope is undecided)"
                )
            print(f"{m.issue.id} [{m.issue.symptom}{'' if m.issue.verified else ', unverified'}]: {state}{unknown}")
            if m.issue.id in blocking:
                print(f"    {m.issue.advice()}")
        if not matches:
            print("no known issue matches this configuration")
    return EXIT_FAILED if blocking else EXIT_OK


def _list(sset: series.SeriesSet) -> str:
    lines = [f"series {sset.root} (sha256 {sset.sha256[:12]})"]
    for rel, rs in sorted(sset.releases.items(), key=lambda kv: [int(x) for x in kv[0].split(".")]):
        for e in rs.entries:
            what = (
                e.patch_name if e.patch_name else e.state.replace("-", " ") + (f": {e.upstream}" if e.upstream else "")
            )
            lines.append(f"  vllm {rel:<9} {e.fix}: {what}")
    for fix in sset.fixes.values():
        lines.append(f"  upstream states of {fix.id}:")
        for u in fix.upstream_states:
            lines.append(f"    {u['releases']:<42} {u['state']:<15} {u.get('line', '')}")
    return "\n".join(lines)


def _write_report(path: Path | None, data: dict[str, Any]) -> None:
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write the report {path}: {exc}") from None
    log.info("report written to %s", path)


def run(args: argparse.Namespace) -> int:
    sset = series.load(args.series_dir or series.default_series_dir())
    if args.known_issues is None:
        known_issues.load(None, sset.root)  # fail before touching anything when the data is missing or broken
    else:
        known_issues.load(args.known_issues)
    if args.command == "list":
        print(_list(sset))
        return EXIT_OK
    if args.command == "known-issues":
        return _known_issues_command(args, known_issues.load(args.known_issues, sset.root))
    if args.target and args.python:
        raise UsageError("give either TARGET or --python, not both")
    root = target.resolve_root(args.target, args.python)
    try:
        tgt = target.detect(root, args.release)
    except TargetNotFound as exc:
        matches = engine.content_matches(sset, root)
        if matches:  # the metadata is missing but the files tell: say which --release would fit
            raise TargetNotFound(f"{exc} (its files match vLLM {', '.join(matches)})") from None
        raise
    if args.command == "status":
        rep = engine.analyze(sset, tgt, "status")
        rep.summary = engine.status_summary(rep)
    elif args.command == "apply":
        rep = engine.apply(sset, tgt, dry_run=args.dry_run)
    elif args.command == "verify":
        rep = engine.verify(sset, tgt)
    else:
        rep = engine.revert(sset, tgt)
    _attach_known_issues(rep, args.known_issues, sset.root)
    data = rep.to_json()
    _write_report(getattr(args, "report", None), data)
    if getattr(args, "json", False):
        print(json.dumps(data, indent=2, sort_keys=True))
    else:
        print(_human(rep))
    return rep.exit_code


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.DEBUG if args.verbose else logging.WARNING if args.quiet else logging.INFO
    logging.basicConfig(level=level, format="vllm-rocm-patches: %(levelname)s: %(message)s", stream=sys.stderr)
    try:
        return run(args)
    except PatchToolError as exc:
        log.error("%s", exc)
        return exc.exit_code
    except known_issues.KnownIssuesError as exc:  # the data file is broken or a configuration cannot be judged
        log.error("%s", exc)
        return EXIT_USAGE


def deprecated_main() -> int:
    """The `vllm-rocm-patches` console script, for one more release; `python -m vllm_rocm_patches` (the image
    build's way, no install) stays as it is."""
    print(
        "vllm-rocm-patches: deprecated, use `vllm-rocm patches ...` or `vllm-rocm known-issues ...` (the old name "
        "goes after the next release)",
        file=sys.stderr,
    )
    return main()


if __name__ == "__main__":
    sys.exit(main())
