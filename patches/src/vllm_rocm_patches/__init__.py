"""Apply, verify and revert the vLLM ROCm patch series (stdlib only, Python >= 3.9).

The tool runs inside base images during `docker build`, so it must not import anything outside the
standard library, and it never imports vLLM: everything is read from the files on disk.
"""

__version__ = "0.1.0"
