"""What the sidecar and qualify share, below both of them: the qualification report's format and rules
(`qualification`), and files written whole for readers that may look at any moment (`files`). Stdlib only (plus
the known-issues package's mode list), so that every reader can import it."""
