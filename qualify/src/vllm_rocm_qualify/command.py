"""`vllm-rocm`: the operator's one command. It only dispatches; each subcommand is its part's own CLI, so that the
image build (`python -m vllm_rocm_patches`), the sidecar image and this command run the same code."""

from __future__ import annotations

import sys
from collections.abc import Callable

USAGE = """\
usage: vllm-rocm COMMAND [ARGS...]

The operator's command of the vLLM ROCm distribution.

commands:
  qualify run|show|replay   find the fastest cudagraph mode that still answers right on this node, with this
                            image and model; writes the report the chart and compose deploy
  qualification apply       check a qualification report and write what a deployment takes from it
                            (the compose gate runs this in the sidecar image)
  qualification publish|current
                            write a checked report into the ConfigMap a Deployment mounts, or say whether the
                            one there still qualifies this release, model and GPU product (the chart's Job)
  patches COMMAND           the patch series against an installed vLLM: status, apply, verify, revert, list
  known-issues [CONFIG]     the known CUDA/HIP-graph bugs, or those a configuration hits (exit 1 when a
                            verified wrong_tokens / crash issue applies unmitigated)

`vllm-rocm COMMAND --help` explains each. The sidecar itself is the image's entrypoint, `vllm-rocm-health serve`.
"""


def _qualify(argv: list[str]) -> int:
    from .cli import main

    return main(argv)


def _qualification(argv: list[str]) -> int:
    import argparse
    import logging

    from vllm_rocm_health.qualification_cli import add_qualification_parser

    parser = argparse.ArgumentParser(prog="vllm-rocm")
    add_qualification_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["qualification", *argv])
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    return int(args.func(args))


def _patches(argv: list[str]) -> int:
    from vllm_rocm_patches.cli import main

    return main(argv)


def _known_issues(argv: list[str]) -> int:
    from vllm_rocm_patches.cli import main

    return main(["known-issues", *argv])


COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "qualify": _qualify,
    "qualification": _qualification,
    "patches": _patches,
    "known-issues": _known_issues,
}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    run = COMMANDS.get(args[0])
    if run is None:
        print(f"vllm-rocm: unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    return run(args[1:])


def deprecated(old: str, new: str, run: Callable[[], int]) -> int:
    """Run an old command name for one more release, saying what replaces it (READMEs and reports out there
    still name it)."""
    print(f"{old}: deprecated, use `{new}` (the old name goes after the next release)", file=sys.stderr)
    return run()


if __name__ == "__main__":
    sys.exit(main())
