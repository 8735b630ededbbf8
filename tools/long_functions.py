"""List the functions over a length limit (docstring excluded) in the
product packages: ``python tools/long_functions.py [limit]``.

A function kept long on purpose says why in a comment on the line above
its ``def`` (or its first decorator), starting with ``# long:``; those are
listed apart.
"""

import ast
import sys
from pathlib import Path

PACKAGES = (
    "common",
    "cache",
    "queues",
    "clients",
    "sockets",
    "dashboard",
    "durablecache",
    "sdk/python/durablecache_client",
)


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Lines from the first statement after the docstring to the end."""
    body = node.body
    first = body[0]
    if (
        len(body) > 1
        and isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        first = body[1]
    return (node.end_lineno or node.lineno) - first.lineno + 1


def main() -> int:
    limit = int(sys.argv[1]) if len(sys.argv) > 1 else 50
    root = Path(__file__).resolve().parent.parent
    long, kept = [], []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            text = path.read_text()
            lines = text.splitlines()
            for node in ast.walk(ast.parse(text)):
                if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    continue
                size = body_lines(node)
                if size <= limit:
                    continue
                top = min([node.lineno] + [d.lineno for d in node.decorator_list])
                above = lines[top - 2].strip() if top > 1 else ""
                row = f"{size:4d}  {path.relative_to(root)}:{node.lineno} {node.name}"
                (kept if above.startswith("# long:") else long).append(row)
    for row in long:
        sys.stdout.write(row + "\n")
    if kept:
        sys.stdout.write(f"kept long, with a reason ({len(kept)}):\n")
        for row in kept:
            sys.stdout.write(row + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
