"""Helpers shared by the test suites (real-data fixtures)."""
