"""The accuracy canary: temperature-0 checks that catch a server answering HTTP 200 with wrong tokens."""

from .config import CanaryConfig
from .runner import CanaryResult, CanaryRunner

__all__ = ["CanaryConfig", "CanaryResult", "CanaryRunner"]
