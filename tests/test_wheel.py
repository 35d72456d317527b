"""The wheel: built from the source tree, installed outside the repository, it carries every file the package
reads at run time (recipes, the bundled dataset, ``py.typed``) and runs ``xdex demo``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytest.importorskip("build")

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "xdex"

CHECK = """
import json, sys
from pathlib import Path
import xdex
from xdex.data import load
from xdex.methods.recipe import METHODS, load_recipe
package = Path(xdex.__file__).parent
demo = load("demo")
print(json.dumps({
    "package": str(package),
    "files": sorted(str(p.relative_to(package)) for p in package.rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts),
    "recipes": {m: load_recipe(m).method for m in METHODS},
    "demo": [demo.name, len(demo.train), len(demo.test), len(demo.labels)],
}))
"""


def run(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, f"{' '.join(args)}\n{result.stdout}\n{result.stderr}"
    return result


@pytest.mark.slow
def test_the_wheel_installs_and_runs_the_demo_outside_the_repository(tmp_path):
    # build from a copy, so that the build's scratch folders stay out of the working tree
    tree = tmp_path / "tree"
    shutil.copytree(ROOT / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, tree / name)
    # no isolation: the build backend (setuptools, in the test extra) comes from this environment, offline
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path / "dist"), str(tree)],
        cwd=tmp_path)
    (wheel,) = (tmp_path / "dist").glob("xdex-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        assert "xdex/py.typed" in archive.namelist()
    target = tmp_path / "site"
    run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-compile", "--target", str(target),
         str(wheel)], cwd=tmp_path)

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # the installed copy alone is importable as xdex; its dependencies come from this environment
    env = {**os.environ, "PYTHONPATH": str(target), "OMP_NUM_THREADS": "1"}
    found = json.loads(run([sys.executable, "-c", CHECK], cwd=elsewhere, env=env).stdout)
    assert Path(found["package"]) == target / "xdex"
    shipped = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*")
                     if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc")
    assert found["files"] == shipped  # every file of the package, data included, is in the wheel
    assert found["recipes"] == {m: m for m in found["recipes"]} and "ngame" in found["recipes"]
    assert found["demo"][0] == "foldoc-links" and min(found["demo"][1:]) > 0

    demo = run([sys.executable, "-m", "xdex", "demo", "--no-train"], cwd=elsewhere, env=env)
    assert "dataset: foldoc-links" in demo.stdout and "popularity" in demo.stdout
    assert list(elsewhere.iterdir()) == []  # the demo writes nothing where it runs
