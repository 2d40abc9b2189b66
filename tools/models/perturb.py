"""Write a deliberately corrupted copy of a model: the same architecture and tokenizer, with seeded noise added
to the attention output projections of some layers. Served by the real vLLM it answers with HTTP 200 and wrong
tokens: the failure the accuracy canary exists to catch (fault injection for the tests, not a fake server)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("src", type=Path, help="model directory (safetensors)")
    ap.add_argument("out", type=Path, help="output directory")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--scale", type=float, default=0.5, help="noise std relative to each tensor's std")
    ap.add_argument("--every", type=int, default=3, help="perturb every Nth layer")
    args = ap.parse_args()
    if (args.out / "model.safetensors").is_file():
        print(f"perturbed model already built: {args.out}")
        return 0
    import torch
    from safetensors.torch import load_file, save_file

    tmp = args.out.with_name(args.out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(args.src, tmp, ignore=shutil.ignore_patterns("model.safetensors"))
    tensors = load_file(str(args.src / "model.safetensors"))
    gen = torch.Generator().manual_seed(args.seed)
    touched = 0
    for name, t in tensors.items():
        parts = name.split(".")
        if "o_proj" in parts and "layers" in parts and int(parts[parts.index("layers") + 1]) % args.every == 0:
            noise = torch.randn(t.shape, generator=gen, dtype=torch.float32) * float(t.float().std()) * args.scale
            tensors[name] = (t.float() + noise).to(t.dtype)
            touched += 1
    if touched == 0:
        raise SystemExit("no o_proj tensors found: unexpected model layout")
    save_file(tensors, str(tmp / "model.safetensors"), metadata={"format": "pt"})
    (tmp / "PERTURBED.txt").write_text(f"seed={args.seed} scale={args.scale} every={args.every} tensors={touched}\n")
    tmp.rename(args.out)
    print(f"perturbed {touched} tensors -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
