"""`python -m vllm_rocm_qualify ...` is `vllm-rocm qualify ...`."""

import sys

from .cli import main

sys.exit(main())
