"""``sglang-kv5d launch`` and ``sglang-kv5d check`` (click commands).

click never parses these commands' arguments: the raw argv goes to
sglang_kv5d.launch, which takes only full ``--kv5d-*`` names before ``--``
and hands every other token to SGLang's own parser untouched. (click's
``ignore_unknown_options`` would let an option of ours swallow an SGLang
option of the same name and forward typos of ours silently.) The click
options below exist only so that ``--help`` documents them.

The package's group (sglang_kv5d.cli:cli, the ``sglang-kv5d`` console script)
calls :func:`register`.
"""

from __future__ import annotations

from typing import List

import click

from ..launch.argv import PLATFORM_CHOICES
from ..surface import LAUNCH_SERVER

_ARGV_KEY = "sglang_kv5d.launch.argv"


class _RawArgsCommand(click.Command):
    """A click command whose arguments reach the callback unparsed."""

    def parse_args(self, ctx: click.Context, args: List[str]) -> List[str]:
        ctx.meta[_ARGV_KEY] = list(args)
        ctx.args = []
        return []


def _doc_options(command: str) -> List[click.Parameter]:
    opts = [
        click.Option(["--kv5d-profile"], metavar="FILE",
                     help="Launch profile (TOML: description, args, [env]). Command-line SGLang options "
                          "come after the profile's and replace profile options of the same name."),
        click.Option(["--kv5d-platform"], type=click.Choice(list(PLATFORM_CHOICES)), default="auto",
                     show_default=True,
                     help="Platform the rules judge (auto: torch.version.hip, CUDA, /opt/rocm). Use rocm to "
                          "lint a ROCm launch from another machine."),
        click.Option(["--kv5d-strict/--kv5d-no-strict"], default=None,
                     help="Set SGLANG_KV5D_STRICT=1/0 (default: leave it; the overlay is strict unless told "
                          "otherwise): fail start-up when a patch 5D needs cannot apply."),
        click.Option(["--kv5d-env"], metavar="NAME=VALUE", multiple=True,
                     help="Set a variable for SGLang; beats the environment and the profile. Repeatable."),
        click.Option(["--kv5d-json"], is_flag=True,
                     help="JSON output: check prints the findings as a list on stdout; launch --kv5d-dry-run prints the whole plan; a real launch prints the findings on stderr."),
    ]
    if command == "launch":
        opts.insert(1, click.Option(["--kv5d-dry-run"], is_flag=True,
                                    help="Print the environment changes and the exact command, each with its "
                                         "origin, and exit: 0 if the check passed, 1 if not, 2 on a usage error."))
    else:
        opts.append(click.Option(["--explain", "--kv5d-explain"], metavar="ID",
                                 help="Print a rule's documentation (e.g. KV5D005) and exit."))
    return opts


_PRECEDENCE = (
    "\b\nEnvironment for SGLang, highest precedence first:\n"
    "  1. command line (--kv5d-env, --kv5d-strict/--kv5d-no-strict)\n"
    "  2. variables already exported in this shell\n"
    "  3. the profile's [env] table\n"
    "  4. defaults: SGLANG_KV5D=1 (always)"
)


def _make_launch() -> click.Command:
    def callback() -> None:
        from ..launch.run import run_launch

        ctx = click.get_current_context()
        code = run_launch(ctx.meta.get(_ARGV_KEY, []), help_text=ctx.get_help())
        ctx.exit(code)

    return _RawArgsCommand(
        "launch",
        callback=callback,
        params=_doc_options("launch"),
        options_metavar="[KV5D OPTIONS]",
        help=(
            f"Check, then exec `python -m {LAUNCH_SERVER} SGLANG_ARGS...` under this interpreter "
            "with SGLANG_KV5D=1.\n\n"
            "Usage: sglang-kv5d launch [--kv5d-* OPTIONS] [--] SGLANG_ARGS...\n\n"
            "Only full --kv5d-* names are ours (anywhere before `--`); every other argument, e.g. --tp, "
            "--port, --model-path, reaches SGLang untouched and is parsed by the installed SGLang's own "
            "parser first. Options SGLang renamed between releases are translated with a warning. "
            "`-- --help` shows SGLang's help.\n\n" + _PRECEDENCE
        ),
        short_help="Check the configuration, then exec SGLang with the overlay on.",
        add_help_option=False,
    )


def _make_check() -> click.Command:
    def callback() -> None:
        from ..launch.run import run_check

        ctx = click.get_current_context()
        code = run_check(ctx.meta.get(_ARGV_KEY, []), help_text=ctx.get_help())
        ctx.exit(code)

    return _RawArgsCommand(
        "check",
        callback=callback,
        params=_doc_options("check"),
        options_metavar="[KV5D OPTIONS]",
        help=(
            "Run the launch rules (KV5D001..) on the arguments `launch` would use; never starts SGLang.\n\n"
            "Usage: sglang-kv5d check [--kv5d-* OPTIONS] [--explain ID] [--] SGLANG_ARGS...\n\n"
            "Exit status: 0 no errors (warnings allowed), 1 errors, 2 usage (including arguments "
            "SGLang's parser rejects).\n\n" + _PRECEDENCE
        ),
        short_help="Check a launch configuration against the KV5D rules.",
        add_help_option=False,
    )


def register(group: click.Group) -> None:
    """Add the ``launch`` and ``check`` commands to the ``sglang-kv5d`` group."""
    group.add_command(_make_launch())
    group.add_command(_make_check())

