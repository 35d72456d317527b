"""The `xdex` command line: `xdex data ...`, `xdex train`, `xdex evaluate`, `xdex predict`, `xdex demo`, `xdex export`.

Each command group lives in its own module; this one assembles them and turns
expected user errors (bad data, missing files) into a one-paragraph message and a
non-zero exit instead of a traceback.
"""

from __future__ import annotations

import logging
import sys

import typer

from xdex.cli import data as data_cmds
from xdex.cli import demo as demo_cmds
from xdex.cli import evaluate as evaluate_cmds
from xdex.cli import export as export_cmds
from xdex.cli import predict as predict_cmds
from xdex.cli import serve as serve_cmds
from xdex.cli import train as train_cmds
from xdex.cli.common import run_guarded

app = typer.Typer(
    name="xdex",
    help="Extreme multi-label classification with label text.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_cmds.app, name="data")
train_cmds.register(app)
evaluate_cmds.register(app)
predict_cmds.register(app)
serve_cmds.register(app)
demo_cmds.register(app)
export_cmds.register(app)


@app.callback()
def _root(verbose: bool = typer.Option(False, "--verbose", "-v", help="Log debug messages.")) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def main() -> None:
    """Console-script entry point."""
    run_guarded(app)
