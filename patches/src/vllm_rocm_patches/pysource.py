"""Read facts from Python source with `ast` (never import vLLM, never grep): class attributes, imports."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any


@dataclass
class CheckResult:
    description: str
    ok: bool
    found: str

    def to_json(self) -> dict[str, Any]:
        return {"description": self.description, "ok": self.ok, "found": self.found}


def dotted(node: ast.AST) -> str:
    """`AttentionCGSupport.ALWAYS` for an Attribute chain, the repr for a constant, else an AST dump."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Constant):
        return repr(node.value) if isinstance(node.value, str) else str(node.value)
    return ast.dump(node)


def find_class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    return None


def class_attribute(cls: ast.ClassDef, attribute: str) -> str | None:
    """The value assigned to `attribute` in the class body (plain or annotated; the last assignment wins)."""
    value: str | None = None
    for node in cls.body:
        if isinstance(node, ast.Assign):
            if any(isinstance(t, ast.Name) and t.id == attribute for t in node.targets):
                value = dotted(node.value)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == attribute:
            value = dotted(node.value) if node.value is not None else "<annotated, no value>"
    return value


def imports_name(tree: ast.Module, module: str, name: str) -> bool:
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == module and node.level == 0:
            if any(a.name == name and a.asname in (None, name) for a in node.names):
                return True
    return False


def count_expression(tree: ast.AST, normalised: str) -> int:
    """Occurrences of an expression (in normalised source form) anywhere in `tree`, assignment targets included."""
    return sum(1 for node in ast.walk(tree) if isinstance(node, ast.expr) and ast.unparse(node) == normalised)


def check(source: str, filename: str, cond: dict[str, Any]) -> CheckResult:
    """Evaluate one post-condition from series.json against `source`."""
    kind = cond["kind"]
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as exc:
        return CheckResult(f"{filename} parses", False, f"SyntaxError: {exc}")
    if kind == "expression-count":
        # How often an expression occurs, compared as normalised source (ast.unparse of both sides), so a
        # reformatted line still counts and a string or comment that merely mentions it does not.
        want = ast.unparse(ast.parse(cond["expression"], mode="eval").body)
        n = count_expression(tree, want)
        desc = f"{filename}: `{want}` occurs {cond['equals']} time(s)"
        return CheckResult(desc, n == cond["equals"], f"{n} time(s)")
    if kind == "imports-name":
        desc = f"{filename} imports {cond['name']} from {cond['module']}"
        ok = imports_name(tree, cond["module"], cond["name"])
        return CheckResult(desc, ok, "imported" if ok else "not imported")
    cls = find_class(tree, cond["class"])
    if kind == "class-attribute":
        desc = f"{cond['class']}.{cond['attribute']} == {cond['equals']}"
        if cls is None:
            return CheckResult(desc, False, f"class {cond['class']} not found")
        value = class_attribute(cls, cond["attribute"])
        return CheckResult(desc, value == cond["equals"], value if value is not None else "<not set>")
    if kind == "class-attribute-absent":
        desc = f"{cond['class']} does not set {cond['attribute']}"
        if cls is None:
            return CheckResult(desc, False, f"class {cond['class']} not found")
        value = class_attribute(cls, cond["attribute"])
        return CheckResult(desc, value is None, "<not set>" if value is None else value)
    raise ValueError(f"unknown post-condition kind {kind!r}")


# declared_support() values when the class sets none of the attributes: it has no base class to inherit one from
# (vLLM 0.10.0's AITER FA builder: nothing declares CUDA-graph support), or it inherits from one.
NOT_DECLARED = "<not declared, no base class>"
INHERITED = "<not declared, inherited>"


def declared_support(source: str, filename: str, cls_name: str, attributes: list[str]) -> tuple[str, str] | None:
    """(attribute, value) of the first of `attributes` the class sets, e.g. ('_cudagraph_support', '...');
    ('', NOT_DECLARED) or ('', INHERITED) when it sets none; None when the class is not there."""
    tree = ast.parse(source, filename)
    cls = find_class(tree, cls_name)
    if cls is None:
        return None
    for attr in attributes:
        value = class_attribute(cls, attr)
        if value is not None:
            return attr, value
    return "", INHERITED if cls.bases else NOT_DECLARED
