"""`vllm-rocm qualification publish|current`: the qualification Job's two steps around `vllm-rocm qualify run`.

`current` asks whether the ConfigMap the Deployment mounts already holds a report that qualifies what is deployed
now (then the Job skips the re-qualification); `publish` writes a fresh report there. Both judge a report with
`deployable()`, one function: the release, the served model and the GPU product it measured, the mode it gives
(its recommendation, which the chart's guard must allow) and its canary baseline. A report that does not pass is
never written; a ConfigMap whose report does not pass is not current."""

from __future__ import annotations

import argparse
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_rocm_core.qualification import QualificationError, Report, gpu_product_name, load, validate
from vllm_rocm_known_issues.evaluator import MODES

from . import direct_http
from .canary.baseline import Baseline, BaselineError

log = logging.getLogger(__name__)

OK, REFUSED, BAD_ARGS, API_FAILED = 0, 1, 2, 3
# Where a pod finds its own namespace (the service account volume the kubelet mounts).
SERVICE_ACCOUNT_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
MANAGED_BY = "vllm-rocm-qualification"
REPORT_KEY, MODE_KEY = "report.json", "mode"
# What the report qualified, on the ConfigMap for people and `kubectl get -o yaml` (the data is the authority).
ANNOTATIONS = {
    "vllm_version": "vllm-rocm/qualified-vllm-version",
    "model": "vllm-rocm/qualified-model",
    "gpu_product": "vllm-rocm/qualified-gpu-product",
    "mode": "vllm-rocm/qualified-mode",
}

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_LABEL_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?")
_LABEL_VALUE = re.compile(r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?")

EXIT_CODES = """\
exit status:
  0  {ok}
  1  {refused}
  2  bad arguments (nothing asked of the API)
  3  the Kubernetes API failed (its HTTP status and message are printed)"""

EXAMPLE_ARGS = (
    "--configmap llama-qualification --namespace llm \\\n"
    "      --vllm-version 0.33.0 --model meta-llama/Llama-3.1-70B-Instruct \\\n"
    "      --gpu-product AMD_Instinct_MI300X_OAM --modes FULL_AND_PIECEWISE,PIECEWISE,NONE"
)

CHECKS = """\
The report passes when it is a valid qualification report (format, rows, verdicts) that was measured
  - on vLLM --vllm-version,
  - for the served model --model,
  - on the GPU product --gpu-product (the node label amd.com/gpu.product-name; a report that names no
    product is refused),
whose recommended cudagraph mode passed and is one of --modes (the modes the chart's guard allows, when
given), and that carries a canary baseline the sidecar can read."""

CLIENT = """\
The Kubernetes API: in a pod, its service account (it needs get, create and update on configmaps); elsewhere
the kubeconfig, as kubectl reads it (KUBECONFIG, else ~/.kube/config). Proxy variables are ignored."""


@dataclass(frozen=True)
class Wanted:
    """What is deployed now, which a report must have qualified."""

    vllm_version: str
    model: str
    gpu_product: str
    modes: tuple[str, ...] = ()  # empty: any mode the report passed


def deployable(report: Report, want: Wanted) -> str:
    """The cudagraph mode `report` gives a deployment of `want`, or QualificationError saying why it gives none.
    The one judgement of both `publish` (before writing) and `current` (of what is written)."""
    report.check_release(want.vllm_version)
    if not want.model:
        raise QualificationError("no served model name to check the report against")
    report.check_served_model(want.model)
    report.check_gpu_product(want.gpu_product)
    mode = report.choose_mode("")
    if want.modes and mode not in want.modes:
        raise QualificationError(
            f"the report recommends cudagraph_mode {mode}, which this deployment does not allow (allowed: "
            f"{', '.join(want.modes)})"
        )
    if report.baseline is None:
        raise QualificationError("the report carries no canary baseline")
    try:
        Baseline.from_raw(report.baseline, "the report's baseline")  # the sidecar's own reader
    except BaselineError as e:
        raise QualificationError(str(e)) from e
    return mode


# --- arguments -----------------------------------------------------------------------------------------------


def add_publish_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "publish",
        help="check a report against what is deployed and write it into the ConfigMap the Deployment mounts",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Write a qualification report into a ConfigMap, creating or replacing it: data report.json\n"
        "(the file, unchanged) and mode (the mode it gives), labels, and annotations saying what it qualified.\n"
        "First the report is checked, exactly as `current` checks the ConfigMap's.\n\n"
        + CHECKS
        + "\nA report that does not pass is not written (the ConfigMap keeps what it held).\n\n"
        + CLIENT
        + "\n\n"
        + EXIT_CODES.format(
            ok="the ConfigMap was written", refused="the report was refused (the reason is printed; nothing written)"
        )
        + "\n\nexample (in the qualification Job, after `vllm-rocm qualify run --gpu-product ...`):\n"
        "  vllm-rocm qualification publish --report /work/report.json " + EXAMPLE_ARGS,
    )
    p.add_argument("--report", type=Path, required=True, help="report JSON written by `vllm-rocm qualify run`")
    _common(p)
    p.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"a label of the ConfigMap besides app.kubernetes.io/managed-by={MANAGED_BY} (repeatable)",
    )
    p.set_defaults(func=publish)

    c = sub.add_parser(
        "current",
        help="whether the ConfigMap already holds a report that qualifies what is deployed now",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Read the ConfigMap `publish` writes and check its report.json exactly as `publish` checks a\n"
        "report; its mode key must be the mode the report gives. Prints `current: MODE` when it passes (the Job\n"
        "then skips the re-qualification), else why not.\n\n"
        + CHECKS
        + "\n\n"
        + CLIENT
        + "\n\n"
        + EXIT_CODES.format(
            ok="current: the ConfigMap's report qualifies what is deployed",
            refused="not current: the ConfigMap does not exist, or its report or mode does not pass",
        )
        + "\n\nexample:\n  vllm-rocm qualification current "
        + EXAMPLE_ARGS,
    )
    _common(c)
    c.set_defaults(func=current)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--configmap", required=True, metavar="NAME", help="the ConfigMap the Deployment mounts")
    p.add_argument(
        "--namespace",
        default="",
        metavar="NS",
        help=f"its namespace (default: this pod's, from {SERVICE_ACCOUNT_NAMESPACE}; outside a pod, required)",
    )
    p.add_argument("--vllm-version", required=True, metavar="V", help="the vLLM release the image runs")
    p.add_argument("--model", required=True, metavar="SERVED", help="the model name the deployment serves")
    p.add_argument(
        "--gpu-product",
        required=True,
        metavar="P",
        help="the GPU product of the nodes it runs on (node label amd.com/gpu.product-name)",
    )
    p.add_argument(
        "--modes",
        default="",
        metavar="M1,M2,...",
        help="the cudagraph modes the chart's guard allows (default: any the report passed)",
    )


class ArgumentError(ValueError):
    """A bad argument: exit 2, nothing asked of the API."""


def wanted(args: argparse.Namespace) -> Wanted:
    for flag, value in (("--vllm-version", args.vllm_version), ("--model", args.model)):
        if not value.strip():
            raise ArgumentError(f"{flag}: empty")
    try:
        product = gpu_product_name(args.gpu_product)
    except QualificationError as e:
        raise ArgumentError(str(e)) from e
    modes = tuple(m.strip().upper() for m in args.modes.split(",") if m.strip())
    bad = [m for m in modes if m not in MODES]
    if bad:
        raise ArgumentError(f"--modes {', '.join(bad)}: not a cudagraph mode ({', '.join(MODES)})")
    return Wanted(args.vllm_version.strip(), args.model, product, modes)


def target(args: argparse.Namespace) -> tuple[str, str]:
    """(namespace, ConfigMap name)."""
    name = args.configmap
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        raise ArgumentError(f"--configmap {name[:80]!r}: not a ConfigMap name (lower-case DNS subdomain)")
    ns = args.namespace
    if not ns:
        try:
            ns = SERVICE_ACCOUNT_NAMESPACE.read_text().strip()
        except OSError as e:
            raise ArgumentError(
                f"no --namespace, and this is not a pod with a service account ({SERVICE_ACCOUNT_NAMESPACE}: "
                f"{e.strerror or e}): give --namespace"
            ) from e
        log.info("namespace %s (from %s)", ns, SERVICE_ACCOUNT_NAMESPACE)
    if not _DNS_LABEL.fullmatch(ns):
        raise ArgumentError(f"namespace {ns[:80]!r}: not a namespace name (lower-case DNS label)")
    return ns, name


def labels(items: list[str]) -> dict[str, str]:
    out = {"app.kubernetes.io/managed-by": MANAGED_BY}
    for item in items:
        key, eq, value = item.partition("=")
        prefix, _, name = key.rpartition("/")
        if (
            not eq
            or not _LABEL_NAME.fullmatch(name)
            or (prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.fullmatch(prefix)))
            or not _LABEL_VALUE.fullmatch(value)
        ):
            raise ArgumentError(f"--label {item[:120]!r}: expected KEY=VALUE, a Kubernetes label")
        if key in out and out[key] != value:
            raise ArgumentError(f"--label {item!r}: {key} is already {out[key]!r}")
        out[key] = value
    return out


# --- the commands ----------------------------------------------------------------------------------------------


def publish(args: argparse.Namespace) -> int:
    try:
        want = wanted(args)
        ns, name = target(args)
        cm_labels = labels(args.label)
    except ArgumentError as e:
        log.error("qualification publish: %s", e)
        return BAD_ARGS
    try:
        text = args.report.read_text()
        report = load(args.report)
        mode = deployable(report, want)
    except (QualificationError, OSError, UnicodeDecodeError) as e:
        log.error("qualification publish: %s refused, nothing written: %s", args.report, e)
        return REFUSED
    log.info(
        "%s qualifies cudagraph_mode %s for vLLM %s, model %s, GPU product %s%s, with a canary baseline",
        args.report,
        mode,
        want.vllm_version,
        want.model,
        want.gpu_product,
        f" (allowed: {', '.join(want.modes)})" if want.modes else "",
    )
    body = _configmap(name, text, mode, want, cm_labels)
    try:
        api = direct_http.kubernetes_core_api(kubeconfig_outside_cluster=True)
        existing = _read(api, ns, name)
        if existing is None:
            api.create_namespaced_config_map(ns, body)
            log.info("created ConfigMap %s/%s: %s, %s=%s", ns, name, REPORT_KEY, MODE_KEY, mode)
        else:
            owner = (existing.metadata.labels or {}).get("app.kubernetes.io/managed-by")
            if owner != MANAGED_BY:
                log.warning("ConfigMap %s/%s was managed by %r; replacing it", ns, name, owner)
            # The version read: a concurrent writer makes this a 409 conflict, not a silent overwrite.
            body["metadata"]["resourceVersion"] = existing.metadata.resource_version
            api.replace_namespaced_config_map(name, ns, body)
            log.info("replaced ConfigMap %s/%s: %s, %s=%s", ns, name, REPORT_KEY, MODE_KEY, mode)
    except Exception as e:  # the API boundary: every failure ends here, said as the API said it
        log.error("qualification publish: ConfigMap %s/%s not written: %s", ns, name, api_error(e))
        return API_FAILED
    print(f"published: cudagraph_mode {mode} in ConfigMap {ns}/{name}")
    return OK


def current(args: argparse.Namespace) -> int:
    try:
        want = wanted(args)
        ns, name = target(args)
    except ArgumentError as e:
        log.error("qualification current: %s", e)
        return BAD_ARGS
    try:
        api = direct_http.kubernetes_core_api(kubeconfig_outside_cluster=True)
        cm = _read(api, ns, name)
    except Exception as e:  # the API boundary, as in publish
        log.error("qualification current: ConfigMap %s/%s not read: %s", ns, name, api_error(e))
        return API_FAILED
    if cm is None:
        print(f"not current: ConfigMap {ns}/{name} does not exist")
        return REFUSED
    data = cm.data or {}
    source = f"ConfigMap {ns}/{name} {REPORT_KEY}"
    try:
        if REPORT_KEY not in data:
            raise QualificationError(f"{source}: missing")
        try:
            raw = json.loads(data[REPORT_KEY])
        except ValueError as e:
            raise QualificationError(f"{source}: not JSON: {e}") from e
        mode = deployable(validate(raw, source), want)
        if data.get(MODE_KEY) != mode:
            raise QualificationError(
                f"ConfigMap {ns}/{name} {MODE_KEY} is {str(data.get(MODE_KEY))[:40]!r}, the report gives {mode}"
            )
    except QualificationError as e:
        print(f"not current: {e}")
        return REFUSED
    log.info("ConfigMap %s/%s qualifies vLLM %s, %s, %s", ns, name, want.vllm_version, want.model, want.gpu_product)
    print(f"current: {mode}")
    return OK


def _configmap(name: str, text: str, mode: str, want: Wanted, cm_labels: dict[str, str]) -> dict[str, Any]:
    facts = {"vllm_version": want.vllm_version, "model": want.model, "gpu_product": want.gpu_product, "mode": mode}
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": cm_labels,
            "annotations": {ANNOTATIONS[k]: v for k, v in facts.items()},
        },
        "data": {REPORT_KEY: text, MODE_KEY: mode},
    }


def _read(api: Any, ns: str, name: str) -> Any | None:
    """The ConfigMap, or None when the API says 404; any other failure raises."""
    from kubernetes.client.exceptions import ApiException

    try:
        return api.read_namespaced_config_map(name, ns)
    except ApiException as e:
        if e.status == 404 and _reason(e) == "NotFound" and _details_kind(e) == "configmaps":
            return None
        raise


def _body(e: Any) -> dict[str, Any]:
    try:
        body = json.loads(getattr(e, "body", None) or "{}")
    except (ValueError, TypeError):
        return {}
    return body if isinstance(body, dict) else {}


def _reason(e: Any) -> str:
    return str(_body(e).get("reason", ""))


def _details_kind(e: Any) -> str:
    details = _body(e).get("details")
    return str(details.get("kind", "")) if isinstance(details, dict) else ""


def api_error(e: BaseException) -> str:
    """The API's own words: HTTP status and the Status message; else the exception, on one line."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(e, ApiException):
        message = _body(e).get("message") or e.reason or "no message"
        return f"HTTP {e.status}: {message}"
    return " ".join(f"{type(e).__name__}: {e}".split())
