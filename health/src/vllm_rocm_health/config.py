"""All sidecar settings in one place. Flags and `VLLM_HEALTH_*` environment variables are generated from the
dataclass fields: a flag beats its variable, a variable beats the default."""

from __future__ import annotations

import argparse
import dataclasses
import os
import re
import typing
from dataclasses import dataclass, field
from typing import Any

import httpx
from vllm_rocm_core.qualification import QualificationError, gpu_product_name
from vllm_rocm_known_issues.evaluator import MODES

from . import logsource
from .canary.config import CanaryConfig

ENV_PREFIX = "VLLM_HEALTH_"
# Short spellings docs/contracts.md promises (`--baseline FILE`) next to the generated `--canary-baseline`.
# `--requested-mode` is the name before 0.2 (same meaning; deprecated).
FLAG_ALIASES: dict[str, tuple[str, ...]] = {"canary_baseline": ("--baseline",), "expected_mode": ("--requested-mode",)}


@dataclass
class SidecarConfig:
    vllm_url: str = field(default="http://127.0.0.1:8000", metadata={"help": "the vLLM server's HTTP API"})
    listen: str = field(default="0.0.0.0:9400", metadata={"help": "host:port for /metrics, /healthz, /readyz"})
    log_source: str = field(
        default="none",
        metadata={
            "help": "where the vLLM log comes from: file:PATH (followed across rotation), stdin, k8s (the `vllm` "
            "container of this pod, via POD_NAME/POD_NAMESPACE), or none"
        },
    )
    log_from_start: bool = field(default=True, metadata={"help": "read a log file from its start (else from its end)"})
    k8s_container: str = field(default="vllm", metadata={"help": "container whose log the k8s source follows"})
    expected_mode: str = field(
        default="",
        metadata={
            "help": "the cudagraph_mode the deployment asked vLLM for (the chart passes it): when vLLM's own engine "
            "config line shows another one, /readyz is 503 (mode_mismatch). Empty: with --qualification the report's "
            "recommended mode (what `qualification apply` deploys), else not checked"
        },
    )
    qualification: str | None = field(
        default=None,
        metadata={  # noqa: UP045 - the flag generator reads Optional
            "help": "a `qualify` report: its baseline (unless --canary-baseline is given) and the modes it passed "
            "(running a mode it failed is 503 mode_failed_qualification, one it did not pass mode_not_qualified)"
        },
    )
    gpu_product: str = field(
        default="",
        metadata={
            "help": "the GPU product this pod runs on, as the node label amd.com/gpu.product-name names it (e.g. "
            "AMD_Instinct_MI300X_OAM; the product the pod's node selector requires). With --qualification, a "
            "report measured on another product, a report naming no product while this is given, or one naming a "
            "product while this is not, makes /readyz 503 (gpu_product_not_qualified)"
        },
    )
    allow_known_issues: str = field(
        default="",
        metadata={
            "help": "comma-separated known-issue ids accepted on purpose (the chart's allowKnownIssues); any other "
            "verified wrong-tokens or crash issue active on the running engine makes /readyz 503"
        },
    )
    model: str = field(default="", metadata={"help": "served model name (default: the first of /v1/models)"})
    kfd_topology: str = field(
        default="/sys/class/kfd/kfd/topology/nodes",
        metadata={
            "help": "the kernel's KFD topology, where the sidecar observes the node's GPU architecture (the known "
            "issues that depend on it are judged on what it finds, before VLLM_HEALTH_GPU_ARCH)"
        },
    )
    health_interval: float = field(
        default=5.0, metadata={"help": "seconds between polls of vLLM /health", "range": (0.1, 3600.0)}
    )
    health_timeout: float = field(default=3.0, metadata={"help": "timeout of one /health poll", "range": (0.1, 600.0)})
    log_grace: float = field(
        default=60.0,
        metadata={
            "help": "seconds vLLM may answer /health before its log must show the engine config line and the "
            "CUDA-graph capture (vLLM writes both before it serves): past it, /readyz names an unreadable log "
            "(engine_config_unseen, log_format_unknown) instead of waiting",
            "range": (1.0, 3600.0),
        },
    )
    events: bool = field(default=True, metadata={"help": "post Kubernetes Events on state changes (in a cluster)"})
    log_format: str = field(default="text", metadata={"help": "sidecar log format: text or json"})
    log_level: str = field(default="INFO", metadata={"help": "sidecar log level"})
    canary: CanaryConfig = field(default_factory=CanaryConfig)

    @property
    def listen_addr(self) -> tuple[str, int]:
        host, _, port = self.listen.rpartition(":")
        return host or "0.0.0.0", int(port)


def _base_type(tp: Any) -> type:
    if typing.get_origin(tp) in (typing.Union, getattr(__import__("types"), "UnionType", None)):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        return args[0]
    return tp


def _parse_bool(v: str) -> bool:
    s = str(v).strip().lower()
    if s in ("1", "true", "yes", "on"):
        return True
    if s in ("0", "false", "no", "off"):
        return False
    # An empty value (`VAR=` or compose's `${UNSET:-}`) says nothing: reading it as false would switch a check off.
    raise argparse.ArgumentTypeError(f"not a boolean: {v!r} (say true or false)")


def _fields(cls: type, prefix: str = "") -> list[tuple[str, dataclasses.Field, type]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            out += _fields(tp, prefix + f.name + "_")
        else:
            out.append((prefix + f.name, f, _base_type(tp)))
    return out


def add_arguments(parser: argparse.ArgumentParser, environ: dict[str, str] | None = None) -> None:
    """One flag per setting; its default comes from the environment when the variable is set."""
    env = os.environ if environ is None else environ
    for name, f, tp in _fields(SidecarConfig):
        var = ENV_PREFIX + name.upper()
        flag = flag_name(name)
        default = f.default if f.default is not dataclasses.MISSING else None
        conv = _parse_bool if tp is bool else tp
        if var in env:
            try:
                default = conv(env[var])
            except (ValueError, argparse.ArgumentTypeError) as e:
                parser.error(f"{var}={env[var]!r}: {e}")
        help_text = f"{f.metadata.get('help', '')} [env {var}; default: {default}]"
        flags = [flag, *FLAG_ALIASES.get(name, ())]
        if tp is bool:
            parser.add_argument(
                *flags, dest=name, action=argparse.BooleanOptionalAction, default=default, help=help_text
            )
        else:
            parser.add_argument(*flags, dest=name, type=conv, default=default, help=help_text, metavar=name.upper())


def _build(cls: type, ns: argparse.Namespace, prefix: str = "") -> Any:
    """Instantiate `cls` from the namespace, recursing into nested dataclass fields (prefix `<field>_`)."""
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            kwargs[f.name] = _build(tp, ns, prefix + f.name + "_")
        else:
            kwargs[f.name] = getattr(ns, prefix + f.name)
    return cls(**kwargs)


def from_args(ns: argparse.Namespace) -> SidecarConfig:
    cfg = _build(SidecarConfig, ns)
    validate(cfg)
    return cfg


def flag_name(name: str) -> str:
    return "--" + name.replace("_", "-")


def check_ranges(obj: Any, prefix: str = "") -> None:
    """Every numeric setting inside its `range` (inclusive) and finite: NaN, inf or 1e12 s intervals are refused
    at start, naming the flag, instead of killing a worker thread later."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        if dataclasses.is_dataclass(hints[f.name]):
            check_ranges(value, prefix + f.name + "_")
            continue
        bounds = f.metadata.get("range")
        if bounds is None:
            continue
        lo, hi = bounds
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not (lo <= value <= hi):
            raise ValueError(f"{flag_name(prefix + f.name)} {value!r}: must be a number from {lo:g} to {hi:g}")


def check_url(url: str) -> None:
    try:
        u = httpx.URL(url)
        port = u.port
    except (httpx.InvalidURL, ValueError, TypeError) as e:
        raise ValueError(f"--vllm-url {url!r}: not a URL ({e})") from e
    if u.scheme not in ("http", "https") or not u.host:
        raise ValueError(f"--vllm-url {url!r}: expected http://HOST:PORT or https://HOST:PORT")
    if port is not None and not 0 < port < 65536:
        raise ValueError(f"--vllm-url {url!r}: port {port} out of range")


_ID = re.compile(r"[a-z0-9][a-z0-9-]{0,99}")


def allow_list(cfg: SidecarConfig) -> tuple[str, ...]:
    return tuple(sorted({i.strip() for i in cfg.allow_known_issues.split(",") if i.strip()}))


def validate(cfg: SidecarConfig) -> None:
    src = cfg.log_source
    if not (src in ("stdin", "k8s", "none") or (src.startswith("file:") and len(src) > 5)):
        raise ValueError(f"--log-source {src!r}: use file:PATH, stdin, k8s or none")
    if src.startswith("file:"):
        problem, fatal = logsource.file_problem(src[5:])
        if fatal:
            raise ValueError(f"--log-source {src!r}: {problem}")
    try:
        host, port = cfg.listen_addr
    except ValueError as e:
        raise ValueError(f"--listen {cfg.listen!r}: expected host:port") from e
    if not 0 <= port < 65536:
        raise ValueError(f"--listen {cfg.listen!r}: port out of range")
    check_url(cfg.vllm_url)
    if cfg.expected_mode and cfg.expected_mode not in MODES:
        raise ValueError(f"--expected-mode {cfg.expected_mode!r}: not a cudagraph_mode ({', '.join(MODES)})")
    if cfg.expected_mode and src == "none":
        raise ValueError("--expected-mode needs a log source: vLLM's own log is where the running mode is read")
    if cfg.log_format not in ("text", "json"):
        raise ValueError(f"--log-format {cfg.log_format!r}: text or json")
    if cfg.log_level.upper() not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise ValueError(f"--log-level {cfg.log_level!r}: DEBUG, INFO, WARNING, ERROR or CRITICAL")
    check_ranges(cfg)
    c = cfg.canary
    if c.enabled and not (c.baseline or cfg.qualification):
        raise ValueError(
            "no accuracy reference: the canary needs a baseline of answers a known-good server gave. Record one with "
            "`vllm-rocm-health baseline record --out baseline.json` and pass --canary-baseline baseline.json, or pass "
            "a qualification report (--qualification report.json, from `vllm-rocm-stack qualify run`). To run "
            "without the canary, say so with --no-canary-enabled: wrong tokens will then NOT be caught. (As "
            "environment variables: VLLM_HEALTH_CANARY_BASELINE, VLLM_HEALTH_QUALIFICATION or "
            "VLLM_HEALTH_CANARY_ENABLED=false; with compose, the overlays compose.baseline.yaml, "
            "compose.qualified.yaml or compose.no-canary.yaml, see docker/README.md)"
        )
    if not c.enabled and c.baseline:
        raise ValueError("--no-canary-enabled with --canary-baseline: say one or the other")
    if cfg.qualification and not os.path.isfile(cfg.qualification):
        raise ValueError(f"--qualification {cfg.qualification!r}: no such file")
    if cfg.gpu_product:
        try:
            gpu_product_name(cfg.gpu_product)
        except QualificationError as e:
            raise ValueError(str(e)) from e
    for iid in allow_list(cfg):
        if not _ID.fullmatch(iid):
            raise ValueError(f"--allow-known-issues: {iid!r} is not a known-issue id")
