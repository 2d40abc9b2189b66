"""Which known issues (known-issues/known-issues.json) the watched server hits, judged from its log at run time.

The rows and their semantics are the patch tool's (`vllm_rocm_known_issues.evaluator`, one evaluator for every
consumer); this module only turns the log state into its `Config`:

- release: the engine line `Initializing a V1 LLM engine (v0.10.2)`; mode: the effective cudagraph_mode
  (NONE when eager), as the capture bars / downgrade warnings show it;
- attention backend: the selection line of platforms/rocm.py (logparse._BACKEND_*);
- quantization, kv_cache_dtype, speculative method, tensor_parallel_size: the engine config line;
  max_num_seqs: `non-default args` (unknown when left at vLLM's default);
- ROCm version, applied patches and the VLLM_ROCM_* environment: vLLM logs none of them (no release from 0.10
  to 0.33 prints the HIP version or the GPU arch), so they come from the image entrypoint's `vllm-rocm facts:`
  line, or from VLLM_HEALTH_ROCM_VERSION (set by the chart);
- the GPU architecture: observed in the node's KFD topology (gpu.py) first, else the facts line, else what the
  operator named (VLLM_HEALTH_GPU_ARCH, the chart's rocm.gpuArch). What is observed wins over what is told.
Whatever is unknown leaves a row `possible`, never `active`: the metric only says active for a row every
condition of which the log (or the deployment) established. One exception keeps the pod out: a verified
wrong-tokens or crash row that every other fact says applies and only the unknown architecture leaves open
(`arch_undecided`: the sidecar's `gpu_arch_unknown`).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field

from vllm_rocm_known_issues import evaluator as ki

from . import gpu
from .state import LogState

log = logging.getLogger(__name__)

ENV_ROCM = "VLLM_HEALTH_ROCM_VERSION"
ENV_ARCH = "VLLM_HEALTH_GPU_ARCH"


@dataclass
class Judgement:
    """The outcome for one snapshot of the log state."""

    ok: bool
    reason: str = ""
    matches: list[ki.Match] = field(default_factory=list)


class KnownIssueJudge:
    """Loads the data once; `judge(state)` is pure and cheap (a few dozen rows), so it runs at scrape time."""

    def __init__(
        self,
        data: ki.KnownIssues | None = None,
        rocm: str | None = None,
        arch: str | None = None,
        environ: dict[str, str] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        self.rocm = rocm or env.get(ENV_ROCM) or None
        self.operator_arch = arch or env.get(ENV_ARCH) or None
        self.observed: gpu.Observation | None = None
        self.data = data
        self.error = ""
        if self.data is None:
            try:
                self.data = ki.load()
            except ki.KnownIssuesError as exc:
                self.error = str(exc)
                log.error("known issues cannot be judged: %s", exc)

    def observe_gpu(self, root: str) -> gpu.Observation:
        """Read the node's GPU architecture once (it does not change under a running pod)."""
        self.observed = gpu.observe(root)
        told = ki.normalize_arch(self.operator_arch)
        if self.observed.arch and told and told != self.observed.arch:
            log.warning(
                "GPU architecture: %s named %s, the node has %s; judging known issues on what the node has",
                ENV_ARCH,
                told,
                self.observed.detail,
            )
        return self.observed

    def arch(self, facts: dict) -> tuple[str | None, str]:
        """(gfx name or None, where it came from: observed | image | operator | unknown)."""
        if self.observed is not None and self.observed.arch:
            return self.observed.arch, "observed"
        image = facts.get("arch")
        if isinstance(image, str) and image:
            return image, "image"
        if self.operator_arch:
            return self.operator_arch, "operator"
        return None, "unknown"

    @property
    def issues(self) -> list[ki.Issue]:
        return self.data.issues if self.data is not None else []

    def config(self, state: LogState) -> ki.Config:
        e = state.engine
        facts = state.image_facts
        mode = "NONE" if e.runs_without_graphs else (e.effective if e.effective in ki.MODES else None)
        env = facts.get("env")
        env = dict(env) if isinstance(env, dict) else None
        arch, _ = self.arch(facts)
        # The backend the log shows, in the evaluator's one spelling; when the log did not show it, the release's own
        # selection rules (the same inference the chart and the patch tool use) from the image's environment.
        if e.platform and e.platform != "rocm":
            # The data describes ROCm's backends; FLASH_ATTN on CUDA is FlashAttention 2/3, not AITER FA (a test GPU)
            backend: str | None = None
        elif e.attention_backend:
            backend = ki.canonical_attention_backend(e.attention_backend)
        else:
            backend = ki.infer_attention_backend(e.version or None, e.platform or "rocm", arch, env)
        return ki.Config(
            release=e.version or None,
            rocm=self.rocm or facts.get("rocm") or None,
            arch=arch,
            attention_backend=backend,
            env=env,
            kv_cache_dtype=e.kv_cache_dtype or None,
            quantization=e.quantization or None,
            speculative_method=e.speculative_method or None,
            tensor_parallel_size=e.tensor_parallel_size,
            max_num_seqs=e.max_num_seqs,
            mode=mode,
            patches=frozenset(p for p in facts.get("patches", []) if isinstance(p, str)),
            architecture=e.architecture or None,
        )

    def judge(self, state: LogState) -> Judgement:
        if self.data is None:
            return Judgement(False, self.error)
        if not state.engines_seen:
            return Judgement(True, "no engine seen yet", [])
        if not state.engine.version:
            return Judgement(False, "vLLM's engine config line carries no readable version")
        try:
            return Judgement(True, "", self.data.evaluate(self.config(state)))
        except Exception as exc:  # noqa: BLE001 - a version that is not PEP 440, or anything the data trips on
            return Judgement(False, f"{type(exc).__name__}: {exc}"[:300])

    def blocking(self, state: LogState, allow: tuple[str, ...]) -> tuple[str, list[str]]:
        """(why the issues could not be judged, or ""; "id: title" of each row that must keep the pod out of
        service). The rule is the deploy-time guard's (KnownIssues.blocking): verified, every condition seen,
        not mitigated by an applied patch, symptom wrong_tokens or crash, not in the allow list."""
        verdict = self.judge(state)
        if not verdict.ok or not state.engines_seen or self.data is None:
            return ("" if verdict.ok else verdict.reason), []
        return "", [f"{m.issue.id}: {m.issue.title}" for m in self.data.blocking(self.config(state), allow)]

    def arch_undecided(self, state: LogState, allow: tuple[str, ...]) -> list[str]:
        """ "id: title" of each verified wrong-tokens / crash row, not allowed and not mitigated, that applies on every
        condition but the GPU architecture, which nobody observed or named: the one unknown a pod is held out for,
        since a verified wrong-tokens configuration on the architecture it names would otherwise be Ready."""
        if self.data is None or not state.engines_seen or self.arch(state.image_facts)[0] is not None:
            return []
        try:
            matches = self.data.evaluate(self.config(state))
        except Exception:  # noqa: BLE001 - judge() reports it (known_issues_unknown)
            return []
        return [
            f"{m.issue.id}: {m.issue.title}"
            for m in matches
            if m.issue.verified
            and m.issue.symptom in ki.BLOCKING_SYMPTOMS
            and m.issue.id not in allow
            and not m.mitigated
            and m.status == ki.POSSIBLE
            and m.unknown == ["archs"]
            and m.scope != ki.OUTSIDE
        ]

    def unknown_ids(self, ids: tuple[str, ...]) -> list[str]:
        known = {i.id for i in self.issues}
        return [i for i in ids if i not in known]
