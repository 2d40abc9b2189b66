"""Settings of the local stack (`make run`), in one place. Every field is also a flag of `vllm-rocm-stack run`."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
WORK = REPO / ".work"


@dataclass
class StackConfig:
    workdir: Path = field(default=WORK / "run", metadata={"help": "logs, Prometheus data and the canary baseline"})
    model: Path = field(default=WORK / "models" / "smollm2-135m-instruct",
                        metadata={"help": "model directory served by vLLM (built offline by `make setup-vllm`)"})
    served_model_name: str = field(default="smollm2-135m-instruct", metadata={"help": "name the API serves"})
    vllm_port: int = field(default=8000, metadata={"help": "vLLM API port (127.0.0.1)"})
    sidecar_port: int = field(default=9400, metadata={"help": "health sidecar port (127.0.0.1)"})
    prometheus_port: int = field(default=9090, metadata={"help": "Prometheus port (127.0.0.1)"})
    enforce_eager: bool = field(default=True, metadata={
        "help": "start vLLM with --enforce-eager (faster start; on CPU CUDA graphs are off anyway)"})
    canary_interval: int = field(default=60, metadata={"help": "seconds between canary runs"})
    baseline: Path | None = field(default=None, metadata={
        "help": "canary baseline JSON; default WORKDIR/baseline-<served name>.json, recorded on first run"})
    status_interval: float = field(default=10.0, metadata={"help": "seconds between status lines"})
    startup_timeout: float = field(default=600.0, metadata={"help": "seconds to wait for vLLM to become ready"})
    exit_after: float = field(default=0.0, metadata={
        "help": "stop by itself after this many seconds of running (0 = until Ctrl-C)"})

    @property
    def baseline_path(self) -> Path:
        return self.baseline or self.workdir / f"baseline-{self.served_model_name}.json"

    @property
    def vllm_url(self) -> str:
        return f"http://127.0.0.1:{self.vllm_port}"

    @property
    def sidecar_url(self) -> str:
        return f"http://127.0.0.1:{self.sidecar_port}"
