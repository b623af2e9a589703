"""MkDocs hooks: the command-line reference is made from the Typer app at every build, so it
cannot go stale (docs/reference/cli.md is generated, not committed)."""

from __future__ import annotations

from pathlib import Path

import typer
import typer.core


def _command_text(command, context_class, path: list[str]) -> list[str]:
    with context_class(command, info_name=" ".join(path)) as context:
        help_text = command.get_help(context)
    lines = [f"{'#' * min(len(path) + 1, 4)} `{' '.join(path)}`", "", "```text", help_text.strip(), "```", ""]
    if hasattr(command, "list_commands"):
        for name in command.list_commands(context):
            lines += _command_text(command.get_command(context, name), context_class, [*path, name])
    return lines


def cli_reference() -> str:
    from eas.cli import app

    typer.core.HAS_RICH = False  # plain text, as a terminal without rich shows it (no boxes)
    root = typer.main.get_command(app)
    return "\n".join(["# The command line", "",
                      "Every command and option, as `eas COMMAND --help` prints them (made from the command "
                      "line itself at every build of these pages).", "",
                      *_command_text(root, root.context_class, ["eas"])])


def on_pre_build(config, **kwargs) -> None:
    target = Path(config["docs_dir"]) / "reference" / "cli.md"
    text = cli_reference()
    if not target.exists() or target.read_text() != text:
        target.write_text(text)
