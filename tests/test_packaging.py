"""The wheel users get (and the sidecar image installs) is the product: it carries the product's packages and the data
its commands read (the known-issues file, the patch series and its index), no developer tooling, and every command
works from an install in a fresh venv outside the checkout, from a directory outside the checkout, with no
environment variable naming a data path (the variables still override).

The wheel is built from exactly what docker/health/Dockerfile's build stage copies (tests/support/product_wheel.py);
the sidecar is served against the named failure injector (tests/support/injector.py), no vLLM server."""

from __future__ import annotations

import configparser
import json
import shutil
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from vllm_rocm_patches import series

from tests.support import product_wheel
from tests.support.canary import make_baseline
from tests.support.injector import AnswererServer, CanaryAnswerer
from tests.support.sidecar import SidecarProcess
from tests.support.vllm_releases import copy_release_tree

REPO = Path(__file__).resolve().parents[1]
PRODUCT = {
    "vllm_rocm_known_issues": "known-issues",
    "vllm_rocm_patches": "patches",
    "vllm_rocm_core": "core",
    "vllm_rocm_qualify": "qualify",
    "vllm_rocm_health": "health",
}
H200 = REPO / "tests" / "fixtures" / "qualify" / "h200-vllm-0.26.0"
LOG = REPO / "health" / "fixtures" / "v0.14.0-dict-default.log"  # vLLM 0.14, AITER FA, FULL_AND_PIECEWISE: no issue


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return product_wheel.build(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="module")
def installed(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> product_wheel.Install:
    inst = product_wheel.install(wheel, tmp_path_factory.mktemp("operator"))
    assert not inst.cwd.resolve().is_relative_to(REPO)
    # The product's modules come from the wheel, not from the checkout or the project venv's editable install.
    for package in PRODUCT:
        assert inst.origin(package).is_relative_to(inst.venv), package
    return inst


def _series_files(root: Path) -> set[str]:
    """Every file the patch tool loads from a series directory (the wheel must carry exactly these)."""
    loaded = series.load(root)
    files = {"index.json"}
    for rs in loaded.releases.values():
        files |= {str(p.relative_to(root)) for p in series._release_files(rs.directory)}
    return files


def test_the_wheel_carries_the_product_its_data_and_no_developer_tooling(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        (ep_name,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        entry_points = configparser.ConfigParser()
        entry_points.read_string(zf.read(ep_name).decode())
        packaged_ki = json.loads(zf.read("vllm_rocm_known_issues/data/known-issues.json"))
    modules = {n for n in names if n.endswith(".py")}
    assert {n.split("/")[0] for n in modules} == set(PRODUCT)
    # Every module of every product root (pyproject.toml lists the packages one by one: none may be left out).
    want = {
        str(p.relative_to(REPO / room / "src"))
        for package, room in PRODUCT.items()
        for p in (REPO / room / "src" / package).rglob("*.py")
    }
    assert modules == want
    data = {n for n in names if not n.endswith(".py") and ".dist-info/" not in n}
    assert data == {"vllm_rocm_known_issues/data/known-issues.json"} | {
        f"vllm_rocm_patches/data/{f}" for f in _series_files(REPO / "patches")
    }
    assert packaged_ki == json.loads((REPO / "known-issues" / "known-issues.json").read_text())
    assert dict(entry_points["console_scripts"]) == {
        "vllm-rocm": "vllm_rocm_qualify.command:main",
        "vllm-rocm-health": "vllm_rocm_health.cli:main",
        "vllm-rocm-patches": "vllm_rocm_patches.cli:deprecated_main",
    }


# Every command and subcommand of the installed wheel explains itself.
HELP = [
    ("vllm-rocm", "--help"),
    *[("vllm-rocm", c, "--help") for c in ("qualify", "qualification", "patches", "known-issues")],
    *[("vllm-rocm", "qualify", c, "--help") for c in ("run", "show", "replay")],
    *[("vllm-rocm", "qualification", c, "--help") for c in ("apply", "publish", "current")],
    *[("vllm-rocm", "patches", c, "--help") for c in ("status", "apply", "verify", "revert", "list", "known-issues")],
    ("vllm-rocm-health", "--help"),
    *[("vllm-rocm-health", c, "--help") for c in ("serve", "parse", "baseline", "qualification")],
    ("vllm-rocm-health", "baseline", "record", "--help"),
    *[("vllm-rocm-health", "qualification", c, "--help") for c in ("apply", "publish", "current")],
    ("vllm-rocm-patches", "--help"),
]


@pytest.mark.parametrize("argv", HELP, ids=" ".join)
def test_every_command_explains_itself(installed: product_wheel.Install, argv: tuple[str, ...]) -> None:
    res = installed.run(*argv)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "usage:" in res.stdout


def test_known_issues_from_the_packaged_data(installed: product_wheel.Install) -> None:
    res = installed.run(
        "vllm-rocm", "known-issues", "--release", "0.10.2", "--backend", "ROCM_AITER_FA", "--mode", "FULL"
    )
    # FULL on an unpatched 0.10.2 with AITER FA is the seed case: refused (exit 1), not a data error (exit 2).
    assert res.returncode == 1, res.stdout + res.stderr
    assert "aiter-fa-full-cudagraph-always [wrong_tokens]: BLOCKS" in res.stdout
    ok = installed.run("vllm-rocm", "known-issues", "--release", "0.33.0", "--backend", "TRITON_ATTN", "--mode", "NONE")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    every = installed.run("vllm-rocm", "known-issues", "--json")
    assert every.returncode == 0, every.stderr
    ids = {i["id"] for i in json.loads((REPO / "known-issues" / "known-issues.json").read_text())["issues"]}
    assert ids == {i["id"] for i in json.loads(every.stdout)}


def test_patches_list_reads_the_packaged_series(installed: product_wheel.Install) -> None:
    res = installed.run("vllm-rocm", "patches", "list")
    assert res.returncode == 0, res.stdout + res.stderr
    packaged = installed.venv.resolve()
    first = res.stdout.splitlines()[0]
    assert first.startswith(f"series {packaged}") and "/vllm_rocm_patches/data" in first, first
    # The same series as the checkout's: the sha256 the image build records.
    assert f"(sha256 {series.load(REPO / 'patches').sha256[:12]})" in first
    for release in series.load(REPO / "patches").releases:
        assert f"vllm {release}" in res.stdout
    old = installed.run("vllm-rocm-patches", "list")  # the deprecated name, for one more release
    assert old.returncode == 0 and "deprecated" in old.stderr


def test_patches_status_apply_verify_revert_on_a_fetched_release(
    installed: product_wheel.Install, tmp_path: Path
) -> None:
    target = copy_release_tree("0.10.2", tmp_path / "site-packages")
    for command, words in [
        ("status", "0001-rocm-aiter-fa-uniform-single-token-decode.patch (applicable)"),
        ("apply", "applied 3 patch(es)"),
        ("verify", "verified: every post-condition holds"),
        ("status", "0001-rocm-aiter-fa-uniform-single-token-decode.patch (applied)"),
        ("revert", "reverted 3 patch(es)"),
    ]:
        res = installed.run("vllm-rocm", "patches", command, str(target))
        assert res.returncode == 0, f"{command}: {res.stdout}{res.stderr}"
        assert words in res.stdout, f"{command}: {res.stdout}"


def test_the_environment_variables_still_override(installed: product_wheel.Install, tmp_path: Path) -> None:
    data = json.loads((REPO / "known-issues" / "known-issues.json").read_text())
    data["issues"] = []
    mine = tmp_path / "mine.json"
    mine.write_text(json.dumps(data))
    res = installed.run("vllm-rocm", "known-issues", "--json", VLLM_ROCM_KNOWN_ISSUES=str(mine))
    assert res.returncode == 0 and json.loads(res.stdout) == [], res.stdout + res.stderr
    gone = installed.run("vllm-rocm", "known-issues", VLLM_ROCM_KNOWN_ISSUES=str(tmp_path / "none.json"))
    assert gone.returncode == 2 and "none.json not found" in gone.stderr, gone.stderr
    shutil.copytree(REPO / "patches" / "vllm-0.33.0", tmp_path / "series" / "vllm-0.33.0")
    shutil.copy(REPO / "patches" / "index.json", tmp_path / "series")
    one = installed.run("vllm-rocm", "patches", "list", VLLM_ROCM_PATCHES_DIR=str(tmp_path / "series"))
    assert one.returncode == 0, one.stderr
    assert one.stdout.startswith(f"series {tmp_path / 'series'}") and "vllm 0.10.2" not in one.stdout


def test_qualify_and_qualification_read_a_report(installed: product_wheel.Install, tmp_path: Path) -> None:
    report = str(H200 / "report.json")
    show = installed.run("vllm-rocm", "qualify", "show", report)
    assert show.returncode == 0 and "FULL_DECODE_ONLY" in show.stdout, show.stderr
    replay = installed.run("vllm-rocm", "qualify", "replay", "--report", report, "--logs", str(H200))
    assert replay.returncode == 0 and "recommended: FULL_DECODE_ONLY" in replay.stdout, replay.stderr
    for command in ("vllm-rocm", "vllm-rocm-health"):
        out = tmp_path / command
        res = installed.run(command, "qualification", "apply", "--report", report, "--out-dir", str(out))
        assert res.returncode == 0, res.stdout + res.stderr
        assert (out / "mode").read_text() == "FULL_DECODE_ONLY\n"


def test_health_parse_reads_a_log(installed: product_wheel.Install) -> None:
    res = installed.run("vllm-rocm-health", "parse", str(REPO / "health" / "fixtures" / "v0.10.2-full-honoured.log"))
    assert res.returncode == 0, res.stderr
    parsed = json.loads(res.stdout)
    assert (parsed["vllm_version"], parsed["effective_mode"], parsed["attention_backend"]) == (
        "0.10.2",
        "FULL",
        "ROCM_AITER_FA",
    )


SEED, N = 7, 6


@pytest.fixture
def answerer(tmp_path: Path) -> Iterator[tuple[AnswererServer, Path]]:
    base = make_baseline(seed=SEED, num_problems=N)
    path = tmp_path / "baseline.json"
    base.save(path)
    server = AnswererServer(CanaryAnswerer(base))
    try:
        yield server, path
    finally:
        server.close()


def test_the_sidecar_serves_from_the_install(installed: product_wheel.Install, answerer, tmp_path: Path) -> None:
    """`vllm-rocm-health serve` judges the known issues from the packaged data (a start error without it) and
    becomes ready once its canary passed against the failure injector's right answers."""
    server, baseline = answerer
    log = tmp_path / "vllm.log"
    log.write_text(LOG.read_text())
    sc = SidecarProcess(
        [
            "--vllm-url",
            server.url,
            "--log-source",
            f"file:{log}",
            "--canary-baseline",
            str(baseline),
            "--model",
            "m",
            "--canary-seed",
            str(SEED),
            "--canary-num-problems",
            str(N),
            "--canary-interval",
            "3600",
            "--canary-timeout",
            "5",
            "--expected-mode",
            "FULL_AND_PIECEWISE",
        ],
        tmp_path / "sidecar.out",
        env=installed.env(),
        command=[str(installed.bin / "vllm-rocm-health")],
        cwd=installed.cwd,
    )
    try:
        assert sc.wait_for(lambda: sc.ready()[0] == 200, 60), (sc.ready(), sc.log_path.read_text()[-3000:])
        assert sc.ready()[1]["reason"] == "ok"
        n_issues = len(json.loads((REPO / "known-issues" / "known-issues.json").read_text())["issues"])
        assert sc.value("vllm_known_issues_evaluated") == 1
        assert len([m for m in sc.metrics().splitlines() if m.startswith("vllm_known_issue_active{")]) == n_issues
    finally:
        assert sc.stop() == 0
