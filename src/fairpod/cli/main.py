"""The ``fairpod`` command: one entry point for data scientists and admins.

Each sub-command lives in its own module of ``fairpod.cli`` and registers itself in ``COMMAND_MODULES``.
The CLI is a thin client of the API: a command module imports only the standard library and ``fairpod.cli``
at the top; what a command needs beyond that (the server for ``up``, the spec model for ``validate``) it imports
when it runs (tests/cli/test_imports.py checks this). Errors print one line to stderr and exit non-zero.
"""

from __future__ import annotations

import argparse
import importlib
import re
import sys
from collections.abc import Sequence

from fairpod import __version__
from fairpod.cli.errors import CliError

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any, NoReturn

# modules that define register(subparsers); each adds its commands with set_defaults(func=...)
COMMAND_MODULES = [
    "fairpod.cli.server_cmds",
    "fairpod.cli.job_cmds",
    "fairpod.cli.service_cmds",
    "fairpod.cli.space_cmds",
    "fairpod.cli.status_cmds",
    "fairpod.cli.admin_cmds",
    "fairpod.cli.node_cmds",
    "fairpod.cli.spec_cmds",
    "fairpod.cli.simulate",
    "fairpod.cli.report_cmds",
    "fairpod.cli.explain_cmds",
    "fairpod.cli.slurm_cmds",
    "fairpod.cli.backup_cmds",
    "fairpod.cli.kube_cmds",
    "fairpod.cli.hyp_cmds",
    "fairpod.cli.srun_cmds",
    "fairpod.cli.sacct_cmds",
    "fairpod.cli.shell_cmds",
    "fairpod.cli.registry_cmds",
    "fairpod.cli.priority_cmds",
]

# commands whose own argument list ends at '--': what follows is the job's command, never parsed as flags
COMMAND_AFTER_DASHES = {"start-job", "start-service"}


class Parser(argparse.ArgumentParser):
    """argparse with one-line errors that name the sub-command, suggest the flag meant, and point at --help."""

    def error(self, message: str) -> NoReturn:
        m = message
        choice = re.match(r"argument [^:]+: invalid choice: '([^']*)' \(choose from (.*)\)$", m)
        if choice is not None:  # a mistyped command: name the one meant, not all forty
            import difflib

            options = re.findall(r"'([^']*)'", choice.group(2))
            close = difflib.get_close_matches(choice.group(1), options, n=1, cutoff=0.6)
            what = "command" if self.prog == "fairpod" else "action"
            m = f"unknown {what} {choice.group(1)!r}" + (f" (did you mean {close[0]}?)" if close else
                                                         f"; one of {', '.join(options)}")
            if not close and (where := self._setting_of(choice.group(1))):  # 'team lend', 'report csv'
                m += f" ({choice.group(1)!r} is not an action but a setting: {where})"
        if m.startswith("unrecognized arguments: "):
            words = m.split(": ", 1)[1].split()
            flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            first = next((w for w in words if w.startswith("-")), words[0])
            import difflib

            close = difflib.get_close_matches(first.split("=")[0], flags, n=1, cutoff=0.6)
            if first.startswith("-"):
                m = f"unknown option {first}" + (f" (did you mean {close[0]}?)" if close else "")
            else:
                m = f"unexpected argument {first!r}"
                if self.prog.endswith("start-job"):
                    m += " (put the job's command after --, e.g. -- python train.py)"
        print(f"{self.prog}: error: {m}; see '{self.prog} --help'", file=sys.stderr)
        sys.exit(2)

    def _setting_of(self, word: str) -> str:
        """Where an action's flags take ``word``: 'fairpod report usage -o csv' for 'csv' (a value of a flag),
        'fairpod team update --lending-limit' for 'lend' (a flag that names it); '' when none does."""
        found: list[str] = []
        w = word.lower()
        for sub in (a for a in self._actions if isinstance(a, argparse._SubParsersAction)):
            for name, child in sorted(sub.choices.items(), key=lambda nc: nc[0] != "update"):  # a change first
                for a in child._actions:
                    flag = next((o for o in a.option_strings if o.startswith("--")), None)
                    if flag is None or flag == "--help":
                        continue
                    values = [str(c) for c in a.choices or ()]
                    hit = next((v for v in values if v.lower() == w), None)
                    if hit is not None:
                        found.append(f"{self.prog} {name} {flag} {hit}")
                    elif len(w) >= 3 and (w in flag.lower() or any(v.lower().startswith(w) for v in values)):
                        found.append(f"{self.prog} {name} {flag}" + (
                            f" {next(v for v in values if v.lower().startswith(w))}" if w not in flag.lower() else ""))
        return ", or ".join(list(dict.fromkeys(found))[:2])

    def _get_formatter(self) -> argparse.HelpFormatter:
        # argparse makes a formatter for every add_argument; without a width each one imports shutil (with bz2,
        # lzma, fnmatch) to ask the terminal's: a few milliseconds of every command, for help that is not shown.
        return self.formatter_class(prog=self.prog, width=_help_width())


_WIDTH: list[int] = []


def _help_width() -> int:
    """What argparse would use: shutil.get_terminal_size()'s columns (COLUMNS, else the terminal of stdout, else
    80) less 2; worked out once per process."""
    if not _WIDTH:
        import os

        try:
            columns = int(os.environ.get("COLUMNS", "0"))
        except ValueError:
            columns = 0
        if columns <= 0:
            try:
                columns = os.get_terminal_size(sys.__stdout__.fileno()).columns if sys.__stdout__ else 0
            except (AttributeError, ValueError, OSError):
                columns = 0
        _WIDTH.append((columns or 80) - 2)
    return _WIDTH[0]


class _Skip:
    """Stands in for the parser of a command that is not being run: takes every call and builds nothing, so a
    command pays only for its own arguments, not for those of the forty others."""

    def __getattr__(self, name: str) -> Any:
        return self._any

    def _any(self, *args: Any, **kw: Any) -> _Skip:
        return self


class _OnlyWanted:
    """The sub-parsers action as register() sees it: only the command named ``wanted`` is really built."""

    def __init__(self, real: argparse._SubParsersAction, wanted: str) -> None:
        self.real = real
        self.wanted = wanted
        self.found = False

    def add_parser(self, name: str, **kw: Any) -> Any:
        if self.wanted == name or self.wanted in kw.get("aliases", ()):
            self.found = True
            return self.real.add_parser(name, **kw)
        return _Skip()


def build_parser(command: str | None = None) -> Parser:
    """The whole parser, or with ``command`` only that command's (the others are not built at all)."""
    parser = Parser(
        prog="fairpod",
        description="Share one accelerator cluster fairly between teams: quotas, borrowing, priorities, "
        "preemption with checkpoint and resume.",
        epilog="'fairpod COMMAND --help' describes a command; 'fairpod status' shows the server, the cluster, "
        "your teams and your jobs.",
    )
    parser.add_argument("--version", action="version", version=f"fairpod {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    only = _OnlyWanted(sub, command) if command else None
    for mod in COMMAND_MODULES:
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name == mod:
                continue
            raise
        m.register(only or sub)
        if only is not None and only.found:
            break
    if only is not None and not only.found:  # a typo: the whole parser, to list the commands there are
        return build_parser()
    _remember_parsers(parser)
    return parser


def _remember_parsers(p: argparse.ArgumentParser) -> None:
    """Each (sub-)parser sets itself as ``_parser``: the deepest one used reports unknown arguments."""
    p.set_defaults(_parser=p)
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in set(action.choices.values()):
                _remember_parsers(child)


def _split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """For start-job: the arguments before the first '--', and the job's command after it."""
    cmd = next((a for a in argv if not a.startswith("-")), None)
    if cmd in COMMAND_AFTER_DASHES and "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def main(argv: Sequence[str] | None = None) -> int:
    args_in = list(sys.argv[1:] if argv is None else argv)
    if args_in == ["--version"]:
        print(f"fairpod {__version__}")
        return 0
    head, job_command = _split_command(args_in)
    command = head[0] if head and not head[0].startswith("-") else None
    parser = build_parser(command)
    args, extra = parser.parse_known_args(head)
    if extra:
        args._parser.error("unrecognized arguments: " + " ".join(extra))
    if job_command is not None:
        args.job_command = job_command
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        rc = args.func(args)
    except CliError as e:
        print(f"fairpod: error: {e}", file=sys.stderr)
        return e.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    return int(rc or 0)


if __name__ == "__main__":
    sys.exit(main())
