"""The tests' import point for the vLLM release fetcher, which lives in the stack package
(vllm_rocm_stack.vllm_releases) so that `make new-release` and the tests share it; the release lists come from
releases.json."""

from __future__ import annotations

from vllm_rocm_stack.vllm_releases import (
    AITER_FA,
    GUARD_RELEASES,
    PATCH_TOOL_PYTHONPATH,
    REPO_ROOT,
    SUPPORTED_VERSIONS,
    UNKNOWN_VERSIONS,
    copy_release_tree,
    release_tree,
    tree_snapshot,
)

__all__ = [
    "AITER_FA",
    "GUARD_RELEASES",
    "PATCH_TOOL_PYTHONPATH",
    "REPO_ROOT",
    "SUPPORTED_VERSIONS",
    "UNKNOWN_VERSIONS",
    "copy_release_tree",
    "release_tree",
    "tree_snapshot",
]
