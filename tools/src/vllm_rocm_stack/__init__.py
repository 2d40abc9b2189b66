"""placeholder until implemented."""
