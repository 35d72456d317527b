"""The compiled kernels of ``src/xdex`` sort with ``np.argsort`` only.

numba gives its sort and argsort helpers the same names, told apart by an id that counts compilations in a process.
A process that loads one kernel from numba's cache and compiles another can get a fresh argsort helper under the id
a cached kernel's sort helper had when it was compiled elsewhere; the cached kernel then calls the argsort helper,
and its ``np.sort`` returns the array unsorted (numba issue 10486). It happened: the character n-gram counts of one
text came back unsorted, with repeated columns, after a process compiled the lexical channel's row sort and loaded
the counting kernel from an older cache. With argsort alone, two helpers of one name are the same code.
"""

from __future__ import annotations

import ast
from pathlib import Path

import xdex

PACKAGE = Path(xdex.__file__).parent


def kernels(tree: ast.AST) -> list[ast.FunctionDef]:
    """The functions compiled by numba (decorated with ``njit`` or ``jit``)."""
    return [node for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
            and any("jit" in ast.unparse(d) for d in node.decorator_list)]


def sort_calls(kernel: ast.FunctionDef) -> list[str]:
    """The ``….sort(…)`` calls in a kernel (``np.sort``, ``array.sort()``), as source text."""
    return [ast.unparse(node) for node in ast.walk(kernel)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sort"]


def test_no_kernel_calls_sort():
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for kernel in kernels(ast.parse(path.read_text(encoding="utf-8"))):
            calls = sort_calls(kernel)
            if calls:
                found[f"{path.relative_to(PACKAGE)}:{kernel.name}"] = calls
    assert not found, f"kernels that call sort (use np.argsort; see this test's docstring): {found}"


def test_the_check_sees_a_sort_in_a_kernel():
    source = ("@numba.njit(cache=True)\ndef f(a):\n    b = np.sort(a)\n    a.sort()\n    return np.argsort(b)\n\n"
              "def g(a):\n    return np.sort(a)\n")
    found = {k.name: sort_calls(k) for k in kernels(ast.parse(source))}
    assert found == {"f": ["np.sort(a)", "a.sort()"]}
