"""The ``vault`` command: a typer app whose commands parse, call the library and render.

Exit codes, chosen by the type of the error (``vault.cli._common.exit_code_of``):

* 0 ok;
* 1 usage or other error, among them a vault written in a newer format
  (``VaultVersionError``: the message says to upgrade rlvault; the vault is not corrupt), a
  location that is not supported or cannot do what was asked (``VaultLocationError``) and a failing
  storage (``VaultStorageError``: a full disk, a file where a folder must be);
* 2 not found / not a vault / not readable (``VaultNotFoundError``, among them a symbolic-link
  loop, and ``VaultAccessError``: no permission, a read-only file system);
* 3 corrupt (``VaultCorruptError``; ``vault verify`` also exits 3 when it finds a problem);
* 130 interrupted (Ctrl-C; a destination being written is removed).

Every failure is one line on stderr (``vault: ...``), without a traceback; an unexpected
exception (a bug) is one line too, exit 1, naming its type. Usage errors (an unknown command or
option, a missing argument, a value out of range) are one line too, naming the command and
its help, exit 1: ``vault: `vault info`: No such option: --foo. See `vault info --help`.``
(``vault`` alone shows the help).
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Iterator
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand, TyperGroup, TyperOption

from vault.cli import _check, _convert, _derive, _episodes, _ls, _ls_info, _show, _tag, _unlock
from vault.cli._common import (
    EXIT_INTERRUPTED,
    EXIT_OTHER,
    EXIT_USAGE,
    exit_code_of,
    one_line,
    say_error,
    typed_storage_error,
)


def reflow(text: str | None) -> str | None:
    """A help text whose paragraphs are each one line, for the terminal to wrap.

    The terminal (or the page) then wraps them at its own width; the line breaks of the
    docstring's source would otherwise show at every width. Paragraphs are separated by a
    blank line; a paragraph whose lines start with a list marker (``*``, ``-``) keeps one line
    per item.

    Args:
        text: a docstring (or None).

    Returns:
        The text reflowed (None for None).
    """
    if text is None:
        return None
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        items: list[list[str]] = []
        for line in paragraph.splitlines():
            line = line.strip()
            if not items or line.startswith(("* ", "- ")):
                items.append([line])
            else:
                items[-1].append(line)
        paragraphs.append("\n".join(" ".join(item) for item in items))
    return "\n\n".join(paragraphs)


class _Flag(TyperOption):
    """A flag (``--json``, ``--help``): its help shows no value type, as it takes no value.

    Typer shows ``<bool>``, as if the flag took one.
    """

    def display_type_rich(self, ctx: Any) -> str | None:
        return None


class _Help:
    """The help of a command (or of the group), as a new user can read it.

    Paragraphs reflowed to the terminal's width (:func:`reflow`) and flags without a value
    type (:class:`_Flag`).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["help"] = reflow(kwargs.get("help"))
        super().__init__(*args, **kwargs)

    def get_params(self, ctx: Any) -> list[Any]:
        params: list[Any] = super().get_params(ctx)  # type: ignore[misc]
        for param in params:
            if type(param) is TyperOption and param.is_flag:
                param.__class__ = _Flag  # typer builds the options; this only adds a method
        return params


class _Group(_Help, TyperGroup):
    """Reports usage errors and library errors as one line each, with their exit code.

    Parsing the command line happens in ``make_context`` (the group's options, then, inside
    ``invoke``, the command's); typer's own report of a usage error (the usage, a hint and a
    boxed message) is replaced by :func:`_usage_error`'s one line.
    """

    def make_context(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().make_context(*args, **kwargs)
        except typer.TyperException as err:
            _usage_error(err)

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        with _naming(ctx):
            return super().parse_args(ctx, args)

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except typer.TyperException as err:
            _usage_error(err)
        except typer.Exit:
            raise
        except typer.Abort:  # Ctrl-C (or no input) at a prompt, before anything was done
            sys.stderr.write("\n")  # end the prompt's line
            say_error("interrupted at the prompt; nothing was done")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except KeyboardInterrupt:
            say_error("interrupted; nothing was left half-written")
            raise typer.Exit(EXIT_INTERRUPTED) from None
        except Exception as err:
            typed = typed_storage_error(err) or err
            code = exit_code_of(typed)
            if code is None:  # a bug: still one line; the cause stays chained for debuggers
                say_error(
                    f"unexpected {type(err).__name__}: {err} (a bug in rlvault: please report it)"
                )
                raise typer.Exit(EXIT_OTHER) from err
            say_error(str(typed))
            raise typer.Exit(code) from None


class _Command(_Help, TyperCommand):
    """A command whose usage errors know the command (see :func:`_naming`)."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        with _naming(ctx):
            return super().parse_args(ctx, args)


@contextlib.contextmanager
def _naming(ctx: Any) -> Iterator[None]:
    """Usage errors raised while ``ctx``'s arguments are parsed carry ``ctx``.

    Click's parser leaves it out of some (e.g. "Option '--rows' requires an argument"); with
    it, the one line names the command.
    """
    try:
        yield
    except typer.TyperException as err:
        if getattr(err, "ctx", None) is None:
            err.ctx = ctx  # type: ignore[attr-defined]
        raise


def _usage_error(err: typer.TyperException) -> NoReturn:
    """One line naming the command, the problem and the command's help; exit ``EXIT_USAGE``.

    Typer's 2 is this command's "not found". ``vault`` alone shows the help, as typer does
    (its error carries the help text).
    """
    if type(err).__name__ == "NoArgsIsHelpError":  # typer's check, without importing it
        err.exit_code = EXIT_USAGE
        raise err
    ctx = getattr(err, "ctx", None)
    command = getattr(ctx, "command_path", None) or "vault"
    text = one_line(err.format_message())
    if not text.endswith((".", "?", "!")):
        text += "."
    say_error(f"`{command}`: {text} See `{command} --help`.")
    raise typer.Exit(EXIT_USAGE) from None


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
        import vault

        typer.echo(f"rlvault {vault.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Show the version."),
    ] = False,
) -> None:
    """Inspect, verify, plot and reshape rlvault datasets."""


for _name, _function in (
    ("ls", _ls.ls),
    ("info", _ls_info.info),
    ("show", _show.show),
    ("stats", _check.stats),
    ("verify", _check.verify),
    ("episodes", _episodes.episodes),
    ("plot", _episodes.plot),
    ("slice", _derive.slice_),
    ("subsample", _derive.subsample),
    ("combine", _derive.combine),
    ("export", _convert.export),  # npz / npy (cli/_export.py) and minari
    ("import", _convert.import_),
    ("tag", _tag.tag),
    ("unlock", _unlock.unlock),
):
    app.command(_name, cls=_Command)(_function)


def main() -> None:
    """Console-script entry point."""
    app()


def __getattr__(name: str) -> Any:
    """``click_command``: the app as the click command typer builds, for the CLI reference.

    docs/cli.md renders it with mkdocs-click (``:module: vault.cli.app``, ``:command:
    click_command``), so the reference is generated from the app itself. Built on access:
    importing the app stays as fast as before.
    """
    if name == "click_command":
        return typer.main.get_command(app)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
