"""`python -m vllm_rocm_patches` (how the image build runs the tool with PYTHONPATH=patches/src:known-issues/src)."""

import sys

from .cli import main

sys.exit(main())
