"""The known CUDA/HIP-graph bugs of vLLM on ROCm: the data file beside this package (known-issues/known-issues.json)
and its one evaluator (`evaluator`). Stdlib only: the patch tool runs it inside base images during `docker build`."""
