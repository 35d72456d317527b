"""Helpers shared by the command modules."""

from __future__ import annotations

import sys

import typer

from xdex.data.errors import DataFormatError


def fail(message: str, code: int = 1) -> None:
    """Print ``message`` to stderr and exit with ``code``."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code)


def run_guarded(app: typer.Typer) -> None:
    """Run the app; user-facing errors become a short message and exit code 1 or 2."""
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
    except Exception as e:  # click usage errors and the like
        import click

        if isinstance(e, click.ClickException):
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, click.exceptions.Abort):
            sys.exit(1)
        raise
