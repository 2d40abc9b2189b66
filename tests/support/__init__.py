"""Everything test modules share (helpers, real-data fixtures, the tiers), imported as `tests.support.<module>`: a
test module imports no other test module or conftest and never edits sys.path (tests/test_lint.py)."""
