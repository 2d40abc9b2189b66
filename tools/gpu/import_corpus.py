"""Bring a recorded corpus (`device.sh collect`'s corpus.tgz) into health/fixtures/corpus/<machine>/.

Each case becomes `<case>.log` (gzip-compressed as `<case>.log.gz` when larger than 48 KiB: the corpus stays small
in the repository) and `<case>.facts.json`: the recorder's facts plus where and when it was recorded. The facts'
`expect` block, what the sidecar must read from the log, is written by hand after reading the log (never derived
from the parser under test); an existing one is kept when a case is imported again.

    python3 tools/gpu/import_corpus.py corpus.tgz [--machine h200] [--dest health/fixtures/corpus]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile
from pathlib import Path

LARGE = 48 * 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archive", type=Path)
    ap.add_argument("--machine", default="h200")
    ap.add_argument("--dest", type=Path, default=Path(__file__).resolve().parents[2] / "health/fixtures/corpus")
    a = ap.parse_args()
    out = a.dest / a.machine
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(a.archive) as tar:
        members = {Path(m.name).name: m for m in tar.getmembers() if m.isfile()}
        machine = ""
        if "machine.txt" in members:
            machine = tar.extractfile(members["machine.txt"]).read().decode().strip()  # type: ignore[union-attr]
        count = 0
        for name, member in sorted(members.items()):
            if not name.endswith(".facts.json"):
                continue
            case = name[: -len(".facts.json")]
            facts = json.loads(tar.extractfile(member).read())  # type: ignore[union-attr]
            log = tar.extractfile(members[f"{case}.log"]).read()  # type: ignore[union-attr]
            old = out / name
            if old.exists():
                facts["expect"] = json.loads(old.read_text()).get("expect", {})
            facts["recorded_on"] = machine.splitlines()
            for stale in (out / f"{case}.log", out / f"{case}.log.gz"):
                stale.unlink(missing_ok=True)
            if len(log) > LARGE:
                (out / f"{case}.log.gz").write_bytes(gzip.compress(log, mtime=0))
            else:
                (out / f"{case}.log").write_bytes(log)
            old.write_text(json.dumps(facts, indent=1, sort_keys=True) + "\n")
            count += 1
    print(f"{count} cases -> {out}")
    return 0 if count else 1


if __name__ == "__main__":
    sys.exit(main())
