"""`python -m vllm_rocm_stack.images` (`make images`): build the images with buildah, no Docker engine."""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

from .build import Builder, default_targets, suite_targets
from .buildah import STORE, Buildah, BuildahError, BuildFailed
from .podman import Podman

DESCRIPTION = """\
Build the project's images from docker/docker-bake.hcl with buildah (daemonless, as root, chroot isolation),
storage under .work/buildah/.

  build [TARGET ...]  bake targets or groups (default: the default release's vLLM image + the sidecar)
  standins [TARGET ...]
                      only the stand-in bases a `build --bases stand-in` of the targets will use (default: the
                      test suite's targets), ahead of it; `make test` runs this beside the vLLM CPU setup
  list                the images in the storage, with sizes
  clean               remove every image and container of the storage (the layer cache starts cold)

--bases pinned (default) builds on the digest-pinned bases, pulled from their registries. --bases stand-in
builds the same Dockerfiles with the same arguments on local stand-ins made with debootstrap and the real
vLLM wheel from PyPI (for machines that reach no image registry; see vllm_rocm_stack/images/standin.py);
those images are tagged <tag>-standin. A failed build names the Dockerfile step and prints the log's tail.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m vllm_rocm_stack.images",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build bake targets")
    b.add_argument("targets", nargs="*", help=f"bake targets or groups (default: {' '.join(default_targets())})")
    b.add_argument(
        "--bases",
        choices=("pinned", "stand-in"),
        default="pinned",
        help="pinned: the Dockerfiles' digest-pinned bases (default); stand-in: local stand-ins",
    )
    b.add_argument("--manifest", type=Path, help="write what was built (JSON) to this file")
    st = sub.add_parser("standins", help="make the stand-in bases of a stand-in build, ahead of it")
    st.add_argument("targets", nargs="*", help="bake targets or groups (default: the test suite's)")
    st.add_argument(
        "--skip-cpu",
        action="store_true",
        help="all but the vLLM CPU build's serving stand-in (it installs the wheels `make setup-vllm` downloads)",
    )
    sub.add_parser("list", help="images in the storage")
    sub.add_parser(
        "clean", help="remove every container (podman's included), named volume, network and image of the storage"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s images: %(message)s",
        datefmt="%H:%M:%S",
    )
    log = logging.getLogger("vllm_rocm_stack.images")
    try:
        if args.command == "build":
            builder = Builder(bases=args.bases)
            manifest = builder.build_all(args.targets or default_targets())
            if args.manifest:
                manifest.write(args.manifest)
            for img in manifest.images:
                print(f"{img.image}  {img.image_id[:12]}  {img.seconds:6.1f} s  base {img.base['name']}")
            log.info(
                "done in %.1f s (stand-in bases: %s); storage %s (%s) holds %.2f GiB",
                manifest.seconds,
                manifest.standin_seconds or "cached",
                manifest.store,
                manifest.driver,
                manifest.store_bytes / 2**30,
            )
        elif args.command == "standins":
            made = Builder(bases="stand-in").prepare_standins(args.targets or suite_targets(), skip_cpu=args.skip_cpu)
            log.info("stand-in bases ready (made: %s)", made or "none, all cached")
        elif args.command == "list":
            buildah = Buildah()
            for stored in buildah.images():
                names = ", ".join(stored.get("names") or ["<none>"])
                print(f"{stored['id'][:12]}  {stored.get('size', '?'):>10}  {names}")
            print(json.dumps({"driver": buildah.driver, "store_gib": round(buildah.disk_bytes() / 2**30, 2)}))
        else:
            for driver in ("overlay", "vfs"):  # every storage root a build made, whichever driver
                if (STORE / driver).is_dir():
                    buildah = Buildah(driver=driver)
                    if shutil.which("podman"):  # containers the tests ran: stopped and removed before their images
                        Podman(buildah).remove_everything()
                    buildah.wipe()
                    log.info("emptied %s", STORE / driver)
    except BuildFailed as exc:
        log.error("%s", exc)
        if args.command == "build" and args.bases == "pinned" and exc.step.startswith("FROM "):
            log.error(
                "the pinned base could not be had; where no image registry is reachable, "
                "`make images IMAGE_BASES=stand-in` builds the same Dockerfiles on local stand-in bases"
            )
        return 1
    except BuildahError as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
