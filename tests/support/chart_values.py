"""Value sets of the chart that several test modules render, and the catalogue of value sets the real API server
checks (tests/kube/test_server_dry_run.py): one list, the same in every session and in any order, rendered by
whichever test asks first (tests/support/helm_chart.py caches renders by their arguments).

CATALOGUE is VALUE_SETS (the documented configurations, also validated offline by tests/charts/test_chart.py) and one
value set per feature the chart tests render whose objects differ in what the API server checks: kinds and fields,
names, labels and annotation keys, quantities, ports, probes, security contexts, env sources, CRD fields. What it
leaves out differs only in what the API server does not read (container args, env values, annotation values,
ConfigMap data). A chart test that renders a new feature adds a value set here.
"""

from __future__ import annotations

from typing import Any

from tests.support.helm_chart import DEFAULT_MODEL, MODES, REPORT, baseline_for

# Value sets rendered and validated end to end.
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "tp8": {"tensorParallelSize": 8},
    "multinode": {
        "multiNode.enabled": True,
        "multiNode.nodes": 2,
        "tensorParallelSize": 8,
        "autoscaling.keda.enabled": True,
    },
    "monitoring-on": {
        "metrics.serviceMonitor.enabled": True,
        "metrics.podMonitor.enabled": True,
        "metrics.prometheusRule.enabled": True,
    },
    # TRITON_ATTN (the backend without AITER) crashes in FULL* modes on 0.14+: known issue
    # triton-attn-rocm-full-capture-fault, so PIECEWISE.
    "aiter-off": {"aiter.enabled": False, "aiter.mha": False, "compilation.cudagraphMode": "PIECEWISE"},
    "release-0.10.2": {"vllm.release": "0.10.2", "compilation.cudagraphMode": "PIECEWISE"},
    "release-0.20": {"vllm.release": "0.20.0", "attentionBackend": "ROCM_AITER_FA"},
    "everything": {
        "metrics.serviceMonitor.enabled": True,
        "metrics.prometheusRule.enabled": True,
        "metrics.grafanaDashboard.enabled": True,
        "autoscaling.keda.enabled": True,
        "canary.baseline": baseline_for(DEFAULT_MODEL),
        "hfToken.existingSecret": "hf",
        "modelCache.existingClaim": "models",
        "compilation.captureSizes": [1, 2, 4, 8],
        "kvCacheDtype": "fp8",
        "maxNumSeqs": 64,
        "maxModelLen": 8192,
        "extraArgs": ["--enable-prefix-caching"],
        "image.digest": "sha256:" + "a" * 64,
    },
    "hpa": {"autoscaling.hpa.enabled": True},
    "caches-off": {
        "modelCache.enabled": False,
        "compileCache.enabled": False,
        "networkPolicy.allowFrom": [{"namespaceSelector": {"matchLabels": {"team": "ml"}}}],
    },
    **{f"mode-{m}": {"compilation.cudagraphMode": m} for m in MODES},
    "eager": {"enforceEager": True, "compilation.cudagraphMode": "NONE"},
    # The canary switched off knowingly, a baseline from an existing ConfigMap, and an acknowledged wrapper.
    "canary-off": {"canary.enabled": False},
    "canary-configmap": {"canary.existingConfigMap": "my-baseline"},
    "wrapper": {"vllm.command": ["numactl", "--interleave=all", "vllm", "serve"], "vllm.commandIsWrapper": True},
}


# A configuration the chart accepts in PIECEWISE and refuses in FULL (known issue mrv2-capture-stream-aiter-splitk:
# vLLM 0.22-0.28 on MI350/MI355 with AITER on and max_num_seqs above 64 aborts capturing full graphs). The venv's
# release (0.32) parses the arguments the chart renders for 0.22: the flags involved are the same in both.
REFUSED_ID = "mrv2-capture-stream-aiter-splitk"
BASE = {
    "attentionBackend": "TRITON_ATTN",
    "compilation.cudagraphMode": "PIECEWISE",
    "vllm.release": "0.22.1",
    "rocm.gpuArch": "gfx950",
    "maxNumSeqs": 65,
}


def _row(release: str, arch: str, mode: str, allow: str, **more: Any) -> dict[str, Any]:
    """The facts a known-issues row is judged on (tests/charts/test_known_issues_chart.py), acknowledged."""
    return {
        "vllm.release": release,
        "vllm.patched": False,
        "rocm.version": "7.0.0",
        "rocm.gpuArch": arch,
        "kvCacheDtype": "auto",
        "quantization": "none",
        "tensorParallelSize": 1,
        "gpusPerNode": 8,
        "maxNumSeqs": 256,
        "compilation.cudagraphMode": mode,
        "speculativeConfig": {},
        "aiter.enabled": True,
        "aiter.mha": True,
        "extraEnv": [],
        "allowKnownIssues": [allow],
        **more,
    }


_MULTINODE = {"multiNode.enabled": True, "tensorParallelSize": 8}
_UNCONFINED_ANNOTATIONS = (  # each acknowledged as runtime/default (tests/security/test_pod_security.py)
    "container.apparmor.security.beta.kubernetes.io/vllm",
    "container.apparmor.security.beta.kubernetes.io/health",
    "seccomp.security.alpha.kubernetes.io/pod",
    "container.seccomp.security.alpha.kubernetes.io/vllm",
)
_SELINUX = {"type": "container_t", "level": "s0:c1,c2"}

FEATURES: dict[str, dict[str, Any]] = {
    # The version label: local versions, pre- and dev releases, one long enough to be cut (tests/charts/test_chart.py,
    # test_known_issues_chart.py). The API server found the first one invalid once.
    **{
        f"release-{name}": {"vllm.release": release, "compilation.cudagraphMode": "PIECEWISE"}
        for name, release in {
            "local": "0.10.2+rocm700",
            "dev-local": "0.10.2.dev383+g1234abc.rocm700",
            "long-local": "0.11.0+" + "g" * 70,
            "long-local-dot": "0.11.0+" + "g" * 56 + ".x",
            "rc": "0.11.0rc1",
            "dev": "0.15.0.dev1",
        }.items()
    },
    "release-0.11-full-unpatched": {
        "compilation.cudagraphMode": "FULL",
        "vllm.patched": False,
        "vllm.release": "0.11.0",
    },
    "release-0.34-extra-args": {
        "vllm.release": "0.34.0",
        "extraArgs": ["--cudagraph-metrics", "--enable-prefix-caching"],
    },
    "release-0.20-automatic-backend": {"vllm.release": "0.20.0", "compilation.cudagraphMode": "FULL_DECODE_ONLY"},
    # Known-issues rows acknowledged: GPU architecture, speculative decoding, quantization, AITER MoE (env).
    "row-aiter-mha": _row("0.11.1rc1", "gfx942", "NONE", "aiter-mha-min-seqlen-q-accuracy"),
    "row-eagle": _row(
        "0.15.0.dev1",
        "gfx942",
        "PIECEWISE",
        "eagle-dummy-run-cudagraph-segfault",
        tensorParallelSize=2,
        speculativeConfig={"method": "eagle", "num_speculative_tokens": 2},
        attentionBackend="TRITON_ATTN",
        **{"aiter.enabled": False},
    ),
    "row-mxfp4-moe": _row(
        "0.22.1",
        "gfx950",
        "PIECEWISE",
        "aiter-mxfp4-moe-graph-unsafe",
        quantization="quark",
        attentionBackend="TRITON_ATTN",
        extraEnv=[{"name": "VLLM_ROCM_USE_AITER_MOE", "value": "1"}],
    ),
    "env-from-secret": {
        "vllm.release": "0.26.0",
        "vllm.patched": False,
        "aiter.enabled": True,
        "quantization": "quark",
        "compilation.cudagraphMode": "FULL_AND_PIECEWISE",
        "attentionBackend": "ROCM_ATTN",
        "rocm.gpuArch": "gfx950",
        "extraEnv": [{"name": "VLLM_ROCM_USE_AITER_MOE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "k"}}}],
    },
    # Sizes, quantities and the shared memory formula (tests/charts/test_chart.py, test_guard.py).
    "tp2": {"tensorParallelSize": 2},
    "tp16-on-16-gpus": {"tensorParallelSize": 16, "gpusPerNode": 16, "resources.limits.memory": "128Gi"},
    "shm-10Gi": {"shm.sizeLimit": "10Gi"},
    "shm-65535Mi": {"shm.sizeLimit": "65535Mi"},
    "shm-63Gi": {"shm.sizeLimit": "63Gi"},
    "memory-35Gi": {"tensorParallelSize": 8, "resources.limits.memory": "35Gi"},
    "memory-decimal-suffix": {"tensorParallelSize": 8, "resources.limits.memory": "37000M"},
    "memory-bytes": {"tensorParallelSize": 8, "resources.limits.memory": 36507222017},
    "requests-only": {"tensorParallelSize": 8, "resources": {"requests": {"cpu": "1"}}},
    "image-tag-and-digest": {"image.tag": "v1", "image.digest": "sha256:" + "b" * 64},
    # Multi-node (LeaderWorkerSet), the accuracy gate's inputs, monitoring objects' settings.
    "multinode-3": {"multiNode.enabled": True, "multiNode.nodes": 3, "tensorParallelSize": 8},
    "multinode-canary-off": {**_MULTINODE, "canary.enabled": False},
    "multinode-hf-token": {**_MULTINODE, "hfToken.existingSecret": "hf"},
    "served-name": {"model.servedName": "llama-8b"},
    "canary-configmap-named-mine": {"canary.existingConfigMap": "mine"},
    "qualification-report": {
        "vllm.release": "0.26.0",
        "model.name": "HuggingFaceTB/SmolLM2-135M-Instruct",
        "model.servedName": "smollm2-135m-instruct",
        "qualification": REPORT.read_text(),
        "sidecar.canaryLongPrompts": 0,
    },
    # The qualification Job (hooks: ServiceAccount, Role with a resourceName, RoleBinding, Job with init containers)
    # and the Deployment that takes its mode from a ConfigMap (configMapKeyRef env, the report mounted).
    "qualification-job": {
        "qualification.job.enabled": True,
        "qualification.gpuProduct": "AMD_Instinct_MI300X_OAM",
        "qualification.job.resources": {"limits": {"amd.com/gpu": 1, "memory": "64Gi"}},
    },
    "qualification-configmap": {"qualification.fromConfigMap": "qual-1"},
    "prometheus-rule-matcher": {
        "metrics.prometheusRule.enabled": True,
        "metrics.prometheusRule.jobMatcher": 'job="my-health"',
        "metrics.prometheusRule.runbookBaseUrl": "https://git.example/runbook.md",
    },
    "dashboard-elsewhere": {
        "metrics.grafanaDashboard.enabled": True,
        "metrics.grafanaDashboard.namespace": "monitoring",
        "metrics.grafanaDashboard.label": "grafana.example.com/dashboard",
        "metrics.grafanaDashboard.labelValue": 1,
        "metrics.grafanaDashboard.labels": {"team": "llm"},
        "metrics.grafanaDashboard.annotations": {"grafana_folder": "vLLM"},
    },
    "pdb-max-unavailable": {"pdb": {"maxUnavailable": 1}},
    "pdb-min-available-percent": {"pdb": {"minAvailable": "50%"}},
    # Pod security (tests/security/test_pod_security.py): contexts, acknowledged annotations, readiness timing.
    "writable-root": {"securityContext.readOnlyRootFilesystem": False},
    **{
        f"apparmor-{where}": {f"{where}.appArmorProfile": {"type": "RuntimeDefault"}}
        for where in ("podSecurityContext", "securityContext", "sidecar.securityContext")
    },
    **{
        f"selinux-{where}": {f"{where}.seLinuxOptions": _SELINUX}
        for where in ("podSecurityContext", "securityContext", "sidecar.securityContext")
    },
    **{f"annotation-{key}": {"podAnnotations": {key: "runtime/default"}} for key in _UNCONFINED_ANNOTATIONS},
    **{
        f"multinode-annotation-{key}": {**_MULTINODE, "podAnnotations": {key: "runtime/default"}}
        for key in _UNCONFINED_ANNOTATIONS
    },
    "readiness-slow-period": {"probes.readiness.periodSeconds": 100, "probes.readiness.failureThreshold": 3},
    "readiness-long-timeout": {
        "probes.readiness.periodSeconds": 60,
        "probes.readiness.failureThreshold": 5,
        "probes.readiness.timeoutSeconds": 60,
    },
}

CATALOGUE: dict[str, dict[str, Any]] = {**VALUE_SETS, **FEATURES}
