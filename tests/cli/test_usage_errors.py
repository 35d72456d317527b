"""A command line that does not parse gets one line on stderr naming what is wrong, and exit code 2."""

from __future__ import annotations

import subprocess
import sys

import pytest

import xdex.cli.common as common


def xdex(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "xdex", *args], capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "expected"), [
    (["bogus"], "No such command 'bogus'"),
    (["--nope"], "No such option: --nope"),
    (["predict", "M", "--input", "f", "--output", "o", "--k", "0"], "--k"),
    (["predict", "M", "--input", "f", "--output", "o", "--batch-size", "0"], "--batch-size"),
    (["predict", "M", "--input", "f", "--output", "o", "--k", "ten"], "--k"),
    (["train", "--data", "demo", "--out", "unused"], "--method"),
])
def test_usage_errors_print_one_line_and_exit_2(args, expected):
    result = xdex(*args)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_the_command_line_answers_without_loading_torch():
    """`xdex --help` and usage errors come before any command runs: torch (2 s to import) is loaded by the commands
    that need it, not by the command line itself."""
    code = "import sys, xdex.cli; print(sorted(m for m in ('torch', 'transformers', 'omikuji') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert result.stdout.strip() == "[]"


def test_a_group_without_a_command_shows_its_help_and_exits_2():
    result = xdex("data")
    assert result.returncode == 2 and "Usage" in result.stdout + result.stderr and "Traceback" not in result.stderr


def test_an_unexpected_error_is_one_line_unless_verbose(monkeypatch, capsys):
    import typer

    app = typer.Typer()

    @app.command()
    def broken() -> None:
        raise RuntimeError("something went wrong")

    monkeypatch.setattr(sys, "argv", ["xdex"])
    with pytest.raises(SystemExit) as exit_:
        common.run_guarded(app)
    assert exit_.value.code == 1
    err = capsys.readouterr().err
    assert err.startswith("error: internal error (RuntimeError: something went wrong)") and "--verbose" in err
    monkeypatch.setattr(common.log, "isEnabledFor", lambda level: True)  # --verbose: the traceback is shown
    with pytest.raises(RuntimeError, match="something went wrong"):
        common.run_guarded(app)
