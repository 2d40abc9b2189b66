"""Exceptions that carry the CLI exit code (see docs/contracts.md)."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # a patch conflicts, a pristine hash mismatches, a post-condition fails
EXIT_USAGE = 2  # bad usage or TARGET not found


class PatchToolError(Exception):
    """Base class; `exit_code` tells the CLI what to return."""

    exit_code = EXIT_FAILED


class UsageError(PatchToolError):
    exit_code = EXIT_USAGE


class TargetNotFound(PatchToolError):
    exit_code = EXIT_USAGE


class SeriesError(PatchToolError):
    """The series directory itself is broken (missing files, bad JSON, bad patch)."""

    exit_code = EXIT_USAGE


class PatchConflict(PatchToolError):
    """A patch does not apply exactly, or a file is not in the expected pristine state."""


class WriteError(PatchToolError):
    """A file could not be written (read-only file or file system); nothing was changed."""
