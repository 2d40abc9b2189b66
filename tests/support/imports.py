"""What a Python file imports (absolute imports only; relative ones stay inside its package), read with ast."""

from __future__ import annotations

import ast
from pathlib import Path


def absolute_imports(path: Path) -> list[str]:
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.append(node.module or "")
    return names
