"""Helpers shared by the command modules."""

from __future__ import annotations

import contextlib
import gc
import logging
import sys
from collections.abc import Iterator
from typing import NoReturn

import typer

from xdex.data.errors import DataFormatError

log = logging.getLogger("xdex.cli")

USAGE_ERROR = 2  # exit code of a command line that does not parse (click's convention)


def fail(message: str, code: int = 1) -> NoReturn:
    """Print ``message`` to stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def loaded_objects_frozen() -> Iterator[None]:
    """Run the block with the objects alive at its start (a loaded model's: about 330,000 for an `ngame` model of
    foldoc-links-titles) left out of the garbage collector's full collections, which would otherwise go through them
    all: a pause of 160 ms for every request in flight of a server, once every few thousand requests, and about 7%
    of `xdex predict`'s time after loading over 30,000 titles (docs/benchmarks.md, "Serving" and "Ranking stage:
    prediction cost").
    Objects made later (added labels, requests, rows) are collected as before; at the end they all are again,
    unless objects were frozen before the block (by the program that runs it), which stay so."""
    frozen_before = gc.get_freeze_count() > 0
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        if not frozen_before:
            gc.unfreeze()


def _is_click(e: BaseException, name: str) -> bool:
    """Whether ``e`` is click's exception class ``name``, from click itself or from the copy typer ships
    (typer >= 0.20 raises ``typer._click`` exceptions, which are not ``click``'s classes)."""
    return any(cls.__name__ == name and cls.__module__.split(".")[-2:-1] in (["click"], ["_click"])
               for cls in type(e).__mro__)


def usage_message(e: BaseException) -> str:
    """One line for a click usage or parameter error: what is wrong, and where to read the usage."""
    message = " ".join(e.format_message().split())  # type: ignore[attr-defined]
    ctx = getattr(e, "ctx", None)
    where = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    return f"error: {message}{where}"


def run_guarded(app: typer.Typer) -> None:
    """Run the app; user-facing errors become one message and exit code 1 (bad input) or 2 (bad usage).

    An unexpected exception is a bug: it is reported in one line, with its traceback under ``--verbose``.
    """
    try:
        code = app(standalone_mode=False)  # returns the exit code instead of raising it
        if isinstance(code, int) and code != 0:
            sys.exit(code)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except DataFormatError as e:
        typer.echo(f"error: the data cannot be loaded:\n{e}", err=True)
        sys.exit(1)
    except OSError as e:  # missing files, existing outputs that would be overwritten, permissions
        typer.echo(f"error: {e}", err=True)
        sys.exit(1)
    except ValueError as e:
        typer.echo(f"error: {e}", err=True)
        sys.exit(1)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
    except Exception as e:
        if _is_click(e, "UsageError"):  # unknown command or option, missing or invalid value
            if e.format_message():  # type: ignore[attr-defined]  # (empty: a group's help was shown instead)
                typer.echo(usage_message(e), err=True)
            sys.exit(USAGE_ERROR)
        if _is_click(e, "ClickException"):
            typer.echo(f"error: {' '.join(e.format_message().split())}", err=True)  # type: ignore[attr-defined]
            sys.exit(getattr(e, "exit_code", 1))
        if _is_click(e, "Abort"):  # Ctrl-C or end of input at a prompt
            typer.echo("aborted", err=True)
            sys.exit(1)
        if log.isEnabledFor(logging.DEBUG):
            raise
        typer.echo(f"error: internal error ({type(e).__name__}: {e}); run the command again with --verbose "
                   "for the traceback, and report it", err=True)
        sys.exit(1)
