"""The ``vault`` command: a typer app whose commands parse, call the library and render.

Exit codes, chosen by the type of the error (``vault.cli._common.exit_code_of``):

* 0 ok;
* 1 usage or other error, among them a vault written in a newer format
  (``VaultVersionError``: the message says to upgrade rlvault; the vault is not corrupt) and
  a location that is not supported (``VaultLocationError``, e.g. ``s3://`` today);
* 2 not found / not a vault (``VaultNotFoundError``);
* 3 corrupt (``VaultCorruptError``; ``vault verify`` also exits 3 when it finds a problem);
* 130 interrupted (Ctrl-C; a destination being written is removed).

Every failure is one line on stderr (``vault: ...``), without a traceback; an unexpected
exception (a bug) is one line too, exit 1, naming its type. Usage errors (a missing or unknown
option) are typer's: the usage line, a hint and the error, exit 1.
"""

from __future__ import annotations

from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from vault.cli import _check, _derive, _episodes, _export, _ls_info, _show
from vault.cli._common import EXIT_INTERRUPTED, EXIT_OTHER, exit_code_of, say_error


class _Group(TyperGroup):
    """Maps usage errors to exit 1 and library errors to one line and their exit code."""

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except typer.TyperException as err:
            _usage_exit_code(err)
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as err:
            _usage_exit_code(err)
            raise
        except (typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:
            say_error("interrupted; nothing was left half-written")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as err:
            code = exit_code_of(err)
            if code is None:  # a bug: still one line; the cause stays chained for debuggers
                say_error(
                    f"unexpected {type(err).__name__}: {err} (a bug in rlvault: please report it)"
                )
                raise typer.Exit(EXIT_OTHER) from err
            say_error(str(err))
            raise typer.Exit(code) from None


def _usage_exit_code(err: typer.TyperException) -> None:
    """Usage errors exit 1 (typer's default, 2, is this command's "not found")."""
    if getattr(err, "exit_code", None) == 2:
        err.exit_code = EXIT_OTHER


app = typer.Typer(
    cls=_Group,
    name="vault",
    help="Inspect, verify, plot and reshape rlvault datasets.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            text = version("rlvault")
        except PackageNotFoundError:
            text = "unknown"
        typer.echo(f"rlvault {text}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Inspect, verify, plot and reshape rlvault datasets."""


app.command("ls")(_ls_info.ls)
app.command("info")(_ls_info.info)
app.command("show")(_show.show)
app.command("stats")(_check.stats)
app.command("verify")(_check.verify)
app.command("episodes")(_episodes.episodes)
app.command("plot")(_episodes.plot)
app.command("slice")(_derive.slice_)
app.command("subsample")(_derive.subsample)
app.command("combine")(_derive.combine)
app.command("export")(_export.export)


def main() -> None:
    """Console-script entry point."""
    app()
