"""The security scanner platform teams run (checkov) on the chart, rendered with every value set the chart tests
render, and on every Dockerfile: no finding may stand without a fix or an inline waiver (checkov's skip annotation in
the template, skip comment in the Dockerfile) that gives a reason, and every waiver must suppress a real finding and
be listed in the chart README's "Security" section.

Images are deployed by digest (the documented way): the value sets are scanned with digests set, and a render by tag
must still be reported (the chart waives nothing about tags).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.support.chart_values import VALUE_SETS
from tests.support.checkov_scan import (
    DOCKERFILES,
    ROOT,
    Finding,
    Report,
    run,
    strip_waivers_from_dockerfile,
    strip_waivers_from_manifests,
)
from tests.support.helm_chart import CHART, kinds, render

FRAMEWORKS = ("kubernetes", "dockerfile")
DIGESTS = {"image.digest": "sha256:" + "1" * 64, "sidecar.image.digest": "sha256:" + "2" * 64}
README = CHART / "README.md"


def manifests(values: dict[str, Any]) -> list[dict[str, Any]]:
    """The rendered objects, plus each LeaderWorkerSet pod template as the Pod it becomes: checkov does not know the
    LeaderWorkerSet kind and would not look inside it."""
    docs = render(values)
    for lws in kinds(docs).get("LeaderWorkerSet", []):
        for role in ("leaderTemplate", "workerTemplate"):
            tmpl = lws["spec"]["leaderWorkerTemplate"][role]
            meta = {
                "name": f"{lws['metadata']['name']}-{role.lower()}",
                "namespace": lws["metadata"]["namespace"],
                "labels": tmpl["metadata"].get("labels", {}),
                "annotations": tmpl["metadata"].get("annotations", {}),
            }
            docs.append({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": tmpl["spec"]})
    return docs


@dataclass
class Scan:
    report: Report  # documented renders, the by-tag render and the Dockerfiles, waivers in place
    unwaived: Report  # the same documented renders and Dockerfiles with every waiver removed
    documented: dict[str, Path]  # value set -> its render with digests
    by_tag: Path
    names: dict[str, str]  # scanned file -> a stable name ("chart/<set>", "docker/...") shared by both runs


@pytest.fixture(scope="module")
def scan(tmp_path_factory: pytest.TempPathFactory) -> Scan:
    work = tmp_path_factory.mktemp("checkov")
    for d in ("documented", "by-tag", "unwaived/chart", "cache"):
        (work / d).mkdir(parents=True)
    names: dict[str, str] = {}
    documented: dict[str, Path] = {}
    unwaived: list[Path] = []
    for name, values in VALUE_SETS.items():
        text = yaml.safe_dump_all(manifests({**values, **DIGESTS}), sort_keys=False)
        documented[name] = work / "documented" / f"{name}.yaml"
        documented[name].write_text(text)
        bare = work / "unwaived" / "chart" / f"{name}.yaml"
        bare.write_text(strip_waivers_from_manifests(text))
        unwaived.append(bare)
        names[str(documented[name])] = names[str(bare)] = f"chart/{name}"
    by_tag = work / "by-tag" / "defaults.yaml"
    by_tag.write_text(yaml.safe_dump_all(manifests({}), sort_keys=False))
    names[str(by_tag)] = "chart-by-tag/defaults"
    for dockerfile in DOCKERFILES:
        rel = dockerfile.relative_to(ROOT)
        bare = work / "unwaived" / rel
        bare.parent.mkdir(parents=True, exist_ok=True)
        bare.write_text(strip_waivers_from_dockerfile(dockerfile.read_text()))
        unwaived.append(bare)
        names[str(dockerfile)] = names[str(bare)] = str(rel)
    report = run([*documented.values(), by_tag, *DOCKERFILES], FRAMEWORKS, work)
    return Scan(report, run(unwaived, FRAMEWORKS, work), documented, by_tag, names)


def key(scan: Scan, f: Finding) -> tuple[str, str, str]:
    name = scan.names.get(f.file, f.file)
    # A Dockerfile waiver holds for the whole file: checkov names the skipped resource "<path>." and the failed one
    # "<path>.<INSTRUCTION>", so a Dockerfile finding is keyed by its file alone.
    return (f.check_id, name, "" if name.startswith("docker/") else f.resource)


def test_every_value_set_and_dockerfile_was_scanned(scan: Scan) -> None:
    """A scan that parsed nothing passes everything: each input must have been checked, each workload kind seen."""
    expected = {str(p) for p in scan.documented.values()} | {str(scan.by_tag)} | {str(p) for p in DOCKERFILES}
    missing = expected - scan.report.files
    assert not missing, f"checkov reported nothing on {sorted(missing)}"
    assert len(DOCKERFILES) >= 3, DOCKERFILES
    resources = {f.resource.split(".")[0] for f in scan.report.skipped}
    assert {"Deployment", "Pod"} <= resources, resources
    lws_pods = {f.resource for f in scan.report.skipped if f.resource.endswith(("-leadertemplate", "-workertemplate"))}
    assert len(lws_pods) == 2, f"the LeaderWorkerSet's leader and worker pods were not scanned: {lws_pods}"
    assert scan.report.passed > 1000


def test_no_finding_without_a_fix_or_a_waiver(scan: Scan) -> None:
    open_findings = [f for f in scan.report.failed if f.file != str(scan.by_tag)]
    assert not open_findings, (
        "findings with neither a fix nor a waiver (fix them, or add checkov's skip annotation/"
        "comment with a reason and list it in the chart README's Security section):\n"
        + "\n".join(f"  {scan.names.get(f.file, f.file)}: {f}" for f in open_findings)
    )


def test_images_by_tag_are_reported_not_waived(scan: Scan) -> None:
    """Deploying by tag is the user's choice and stays visible to their scanner: the default render (tags) fails the
    digest check (and the pull-policy check that a digest satisfies) on every pod, and nothing else."""
    got = {(f.check_id, f.resource) for f in scan.report.failed if f.file == str(scan.by_tag)}
    pods = {"Deployment.llm.rel-vllm-rocm", "Pod.llm.rel-vllm-rocm-test"}
    assert got == {(check, pod) for check in ("CKV_K8S_43", "CKV_K8S_15") for pod in pods}, got


def test_every_waiver_gives_a_reason(scan: Scan) -> None:
    for f in scan.report.skipped:
        reason = f.waiver.strip()
        assert reason and reason != "No comment provided", f"waiver without a reason: {f}"
        assert "\n" not in reason, f"a waiver's reason is one line: {f}"
        assert len(reason.split()) >= 8 and reason.lower() != f.name.lower(), f"say why, not what: {f}: {reason!r}"


def test_every_waiver_suppresses_a_real_finding(scan: Scan) -> None:
    """Without the waivers, exactly the waived checks fail: no stale waiver, none that hides more than it says."""
    waived = {key(scan, f) for f in scan.report.skipped if f.file != str(scan.by_tag)}
    failing = {key(scan, f) for f in scan.unwaived.failed}
    assert waived, "no waiver found: the scan cannot have seen the chart"
    assert failing == waived, f"stale waivers: {sorted(waived - failing)}; unexplained: {sorted(failing - waived)}"


def test_waivers_are_listed_in_the_readme(scan: Scan) -> None:
    """The chart README's Security section names every waived check (and no other): what a reviewer reads first."""
    text = README.read_text()
    section = re.search(r"^## Security\n(.*?)(?=^## )", text, flags=re.S | re.M)
    assert section, "chart README has no '## Security' section"
    listed = set(re.findall(r"^\| `(CKV2?_[A-Z0-9]+_\d+)`", section.group(1), flags=re.M))
    waived = {f.check_id for f in scan.report.skipped}
    assert listed == waived, (
        f"README Security table lists {sorted(listed)}, the templates and Dockerfiles waive {sorted(waived)}"
    )


def test_strip_helpers_remove_only_waivers() -> None:
    """The unwaived run is only meaningful if stripping removes the waivers and nothing else."""
    docs = [
        {
            "kind": "Pod",
            "metadata": {"name": "p", "annotations": {"checkov.io/skip1": "CKV_K8S_8=why", "other": "kept"}},
        }
    ]
    assert yaml.safe_load(strip_waivers_from_manifests(yaml.safe_dump_all(docs)))["metadata"]["annotations"] == {
        "other": "kept"
    }
    text = "FROM a:1@sha256:x\n# checkov:skip=CKV_DOCKER_2: why\n# a comment\nUSER 1\n"
    assert strip_waivers_from_dockerfile(text) == "FROM a:1@sha256:x\n# a comment\nUSER 1\n"
