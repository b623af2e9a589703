"""The `eas` command line: commands registered top-down from one module per concern.

Known errors become one line on stderr and exit code 2 (EAS_DEBUG=1 shows the traceback).
"""

from __future__ import annotations

import os
import sys

import typer

from eas.application import prepare_process
from eas.cli import agent, arch, compress, evaluate, export, queue, search, studies, supernet, train, ui, verify
from eas.errors import UserError
from eas.units import printable

app = typer.Typer(help="EAS: search small, accurate, energy-frugal neural networks.",
                  no_args_is_help=True, pretty_exceptions_enable=False, add_completion=False)
arch_app = typer.Typer(help="Sample and inspect architecture genomes.", no_args_is_help=True)
app.add_typer(arch_app, name="arch")
agent_app = typer.Typer(help="The deployment target in the loop: serve its agent, ask it, calibrate.",
                        no_args_is_help=True)
app.add_typer(agent_app, name="agent")
app.add_typer(agent_app, name="device", hidden=True)  # the group's name before the agent had its own
supernet_app = typer.Typer(help="One-shot search: train one network holding a whole space, once.",
                           no_args_is_help=True)
app.add_typer(supernet_app, name="supernet")

app.command("spaces")(arch.spaces_command)
arch_app.command("sample")(arch.sample_command)
arch_app.command("show")(arch.show_command)
app.command("evaluate")(evaluate.evaluate_command)
app.command("search")(search.search_command)
app.command("worker")(search.worker_command)
app.command("studies")(studies.studies_command)
app.command("stop")(queue.stop_command)
app.command("resume")(queue.resume_command)
app.command("show")(studies.show_command)
app.command("verify")(verify.verify_command)
app.command("export")(export.export_command)
app.command("train")(train.train_command)
app.command("compress")(compress.compress_command)
app.command("ui")(ui.ui_command)
agent_app.command("serve")(agent.serve_command)
agent_app.command("info")(agent.info_command)
agent_app.command("calibrate")(agent.calibrate_command)
supernet_app.command("train")(supernet.train_command)
supernet_app.command("trust")(supernet.trust_command)
supernet_app.command("show")(supernet.show_command)


def main() -> None:
    """Entry point: known errors, ours and the option parser's, become one line on stderr and
    exit code 2; Ctrl-C exits with 130."""
    prepare_process()  # the application's choices for its process: thread waiting, log lines
    try:
        code = app(standalone_mode=False)
    except typer.TyperException as error:  # the option parser's: a bad value, an unknown command
        if type(error).__name__ == "NoArgsIsHelpError":  # `eas` or `eas arch` alone: show the help
            print(error.ctx.get_help())
            code = 0
        else:
            print(f"eas: error: {printable(error.format_message())}", file=sys.stderr)
            code = error.exit_code
    except UserError as error:
        if os.environ.get("EAS_DEBUG"):
            raise
        print(f"eas: error: {printable(str(error))}", file=sys.stderr)
        code = 2
    except typer.Abort:
        code = 130
    sys.exit(code or 0)
