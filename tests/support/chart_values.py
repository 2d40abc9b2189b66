"""Value sets of the chart that several test modules render."""

from __future__ import annotations

from typing import Any

from tests.support.helm_chart import DEFAULT_MODEL, MODES, baseline_for

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
