"""Running the `xdex` command line in the test process, as its console script does."""

from __future__ import annotations

import sys

from xdex.cli import main


def xdex_cli(monkeypatch, capsys, *args) -> tuple[int, str, str]:
    """Run ``xdex ARGS`` as the console script does: exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["xdex", *map(str, args)])
    try:
        main()
        code = 0
    except SystemExit as e:
        code = e.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err
