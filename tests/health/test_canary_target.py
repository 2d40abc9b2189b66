"""The canary talks only to its vLLM (issue 30, item 3): proxy variables in the sidecar's environment, a redirect
from "vLLM", and the resolver's alias variables cannot send the canary's questions or the /health polls to another
server. Each process test puts a decoy that answers right where the environment (or a redirect) points, in front of
a server that answers wrong: a canary that asked the decoy would pass. Both are the failure injector
(tests/support/injector.py); what is tested is the real sidecar process."""

from __future__ import annotations

import ast
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry as Registry
from vllm_rocm_health import direct_http
from vllm_rocm_health.canary import CanaryConfig, CanaryRunner

from tests.support.canary import make_baseline
from tests.support.http import LocalServer, QuietHandler
from tests.support.injector import AnswererServer, CanaryAnswerer
from tests.support.sidecar import SidecarProcess

SEED, N = 5, 4
HEALTH = Path(__file__).resolve().parents[2] / "health" / "src" / "vllm_rocm_health"


@pytest.fixture
def servers(tmp_path: Path) -> Iterator[tuple[AnswererServer, AnswererServer, Path]]:
    """(wrong, decoy, baseline path): `wrong` answers every sum wrong with HTTP 200; `decoy` answers right, also when
    asked as a proxy."""
    base = make_baseline(seed=SEED, num_problems=N)
    path = tmp_path / "baseline.json"
    base.save(path)
    wrong_answers = CanaryAnswerer(base)
    usage = {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}
    for kind in ("problem", "long"):
        wrong_answers.override(kind, 200, {"choices": [{"index": 0, "text": " 1000"}], "usage": usage})
    wrong, decoy = AnswererServer(wrong_answers), AnswererServer(CanaryAnswerer(base))
    try:
        yield wrong, decoy, path
    finally:
        wrong.close()
        decoy.close()


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without any proxy or resolver variable of its own, plus `extra`."""
    drop = set(direct_http.ignored_environment(os.environ)) | set(direct_http.RESOLVER_ENV)
    return {**{k: v for k, v in os.environ.items() if k not in drop}, **extra}


def canary_sidecar(url: str, baseline: Path, log: Path, env: dict[str, str]) -> SidecarProcess:
    return SidecarProcess(
        [
            "--vllm-url",
            url,
            "--log-source",
            "none",
            "--canary-baseline",
            str(baseline),
            "--canary-num-problems",
            str(N),
            "--canary-seed",
            str(SEED),
            "--canary-interval",
            "600",
            "--canary-timeout",
            "20",
            "--health-interval",
            "0.2",
        ],
        log,
        env=env,
    )


def first_run(sc: SidecarProcess) -> str:
    """The outcome of the sidecar's first canary run."""
    outcomes = ("pass", "fail", "error")
    assert sc.wait_for(lambda: sum(sc.total("vllm_canary_runs_total", outcome=o) for o in outcomes) >= 1, 120), (
        sc.log_path.read_text()[-3000:]
    )
    return next(o for o in outcomes if sc.total("vllm_canary_runs_total", outcome=o) >= 1)


def test_proxy_variables_do_not_redirect_the_canary(servers, tmp_path: Path) -> None:
    wrong, decoy, baseline = servers
    secret = f"http://user:s3cret@{decoy.url.removeprefix('http://')}"
    proxies = {name: secret for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "ALL_PROXY", "all_proxy")}
    sc = canary_sidecar(wrong.url, baseline, tmp_path / "sidecar.log", clean_env(**proxies, NO_PROXY=""))
    try:
        outcome = first_run(sc)
        text = sc.log_path.read_text()
        assert outcome == "fail", text[-3000:]  # the wrong server was asked, and its answers judged
        assert decoy.requests == 0, "the decoy in the proxy variables was asked"
        assert wrong.requests > 0
        assert sc.ready()[1]["reason"].startswith("canary fail:"), sc.ready()
        # Said once, by name; never the value (a proxy URL may carry a password).
        assert text.count("ignoring ") == 1, text
        assert all(name in text for name in proxies) and "s3cret" not in text, text
    finally:
        assert sc.stop() == 0


class Redirector(LocalServer):
    """Failure injection: every request answered `307 Temporary Redirect` to another server."""

    def __init__(self, to: str) -> None:
        self.requests = 0
        outer = self

        class H(QuietHandler):
            def _reply(self) -> None:
                outer.requests += 1
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(307)
                self.send_header("Location", to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            do_GET = do_POST = _reply  # noqa: N815

        super().__init__(H, name="redirector")


def test_a_redirect_is_not_followed(servers, tmp_path: Path) -> None:
    """A 30x from the configured vLLM URL is an answer (not 200: /health failing, a canary error), never a new
    target. The sidecar process polls /health through the redirect; the canary, which waits for a healthy /health,
    is run directly against it."""
    _, decoy, baseline = servers
    redirector = Redirector(decoy.url)
    sc = canary_sidecar(redirector.url, baseline, tmp_path / "sidecar.log", clean_env())
    try:
        assert sc.wait_for(lambda: redirector.requests >= 5, 60)
        assert sc.ready() == (503, {"ready": False, "reason": "vLLM /health is failing"})
        runner = CanaryRunner(
            CanaryConfig(baseline=str(baseline), num_problems=N, seed=SEED, timeout=20), redirector.url, Registry()
        )
        try:
            result = runner.run_once()
        finally:
            runner.close()
        assert (result.outcome, result.error_kind, result.http_status) == ("error", "http_status", 307), result
        assert decoy.requests == 0
    finally:
        assert sc.stop() == 0
        redirector.close()


def test_ignored_environment_names_any_case_never_values() -> None:
    env = {
        "HTTP_PROXY": "http://p:1",
        "https_proxy": "http://p:2",
        "All_Proxy": "socks5://p:3",
        "no_proxy": "example.com",
        "ftp_proxy": "",  # empty: nothing to ignore
        "NETRC": "/tmp/netrc",
        "SSL_CERT_FILE": "/tmp/ca.pem",
        "PATH": "/bin",
    }
    assert direct_http.ignored_environment(env) == [
        "All_Proxy",
        "HTTP_PROXY",
        "https_proxy",
        "no_proxy",
        "NETRC",
        "SSL_CERT_FILE",
    ]


def test_isolate_drops_the_resolver_aliases(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    env = {"HOSTALIASES": "/tmp/aliases", "LOCALDOMAIN": "evil.example", "HTTP_PROXY": "http://p:1", "PATH": "/bin"}
    names = direct_http.isolate(env)
    assert names == ["HTTP_PROXY", "HOSTALIASES", "LOCALDOMAIN"]
    assert env == {"HTTP_PROXY": "http://p:1", "PATH": "/bin"}  # proxies stay set; the clients ignore them
    assert "/tmp/aliases" not in caplog.text and "http://p:1" not in caplog.text
    # os.environ writes through to the C library's environment, which the resolver reads.
    monkeypatch.setenv("HOSTALIASES", "/tmp/aliases")
    direct_http.isolate(os.environ)
    assert "HOSTALIASES" not in os.environ


def test_kubernetes_client_ignores_proxy_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    from kubernetes import client, config

    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")

    def fake_incluster(client_configuration: client.Configuration, **_: object) -> None:
        client_configuration.host = "https://10.96.0.1:443"  # what the loader sets from KUBERNETES_SERVICE_*

    unasked = client.Configuration()
    unasked.host = "https://10.96.0.1:443"
    assert unasked.proxy == "http://127.0.0.1:9"  # what the client does unasked
    monkeypatch.setattr(config, "load_incluster_config", fake_incluster)
    api = direct_http.kubernetes_core_api()
    assert api.api_client.configuration.host == "https://10.96.0.1:443"
    assert api.api_client.configuration.proxy is None


def test_every_http_client_of_the_sidecar_is_made_in_direct_http() -> None:
    """An httpx client, request or transport, or a Kubernetes client, made anywhere else in the sidecar would read
    the environment again. Found by the syntax tree, not by grep."""
    made = {"Client", "AsyncClient", "HTTPTransport", "AsyncHTTPTransport", "get", "post", "put", "request", "stream"}
    offenders = []
    for path in sorted(HEALTH.rglob("*.py")):
        if path.name == "direct_http.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            f = node.func if isinstance(node, ast.Call) else None  # calls only: `client: httpx.Client` is a type
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name):
                if (f.value.id == "httpx" and f.attr in made) or f.attr == "load_incluster_config":
                    offenders.append(f"{path.relative_to(HEALTH)}:{node.lineno} {f.value.id}.{f.attr}")
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                # kubernetes.client's models (an Event's body) are no client; its config loader makes one.
                names = [a.name for a in node.names]
                module = getattr(node, "module", None) or ""
                direct = {"urllib.request", "requests", "kubernetes.config", "http.client", "aiohttp"}
                if direct & {module, *names} or (module == "kubernetes" and "config" in names):
                    offenders.append(f"{path.relative_to(HEALTH)}:{node.lineno} imports {module} {names}")
    assert not offenders, offenders
