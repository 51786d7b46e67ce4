"""Print the package's size: lines and code lines, outside and inside the emulator.

Code lines are the lines that hold a token other than a comment, a docstring or
whitespace, so the figure does not move when prose is added or removed. Also prints the
largest modules. Run: ``python benchmarks/package_size.py``.
"""

from __future__ import annotations

import ast
import io
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "pytest_sglang"


def docstring_lines(tree: ast.AST) -> set[int]:
    """The line numbers covered by module, class and function docstrings."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    end = body[0].end_lineno or body[0].lineno
                    lines.update(range(body[0].lineno, end + 1))
    return lines


def code_lines(source: str) -> int:
    """The number of lines that hold code (not comments, docstrings or blank)."""
    skip = docstring_lines(ast.parse(source))
    lines: set[int] = set()
    ignored = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in ignored or token.type == tokenize.ENDMARKER:
            continue
        for line in range(token.start[0], token.end[0] + 1):
            if line not in skip:
                lines.add(line)
    return len(lines)


def main() -> None:
    """Print lines / code lines for the package outside and inside the emulator."""
    outside = "package (excluding emulator)"
    totals = {outside: [0, 0], "emulator": [0, 0]}
    sizes: list[tuple[int, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        source = path.read_text()
        part = "emulator" if "emulator" in path.relative_to(PACKAGE).parts else outside
        totals[part][0] += len(source.splitlines())
        totals[part][1] += code_lines(source)
        sizes.append((len(source.splitlines()), str(path.relative_to(PACKAGE.parent))))
    for part, (lines, code) in totals.items():
        print(f"{part}: {lines} lines, {code} code lines")
    print("largest modules:")
    for lines, name in sorted(sizes, reverse=True)[:5]:
        print(f"  {lines:5d} {name}")


if __name__ == "__main__":
    main()
