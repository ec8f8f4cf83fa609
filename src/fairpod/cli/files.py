"""Reading the user's files: YAML errors as one line naming the file, the line and the column."""

from __future__ import annotations

from fairpod.cli.errors import CliError

TYPE_CHECKING = False  # typing costs an import a command need not pay
if TYPE_CHECKING:
    from typing import Any


def yaml_problem(path: str, e: Exception) -> str:
    """'job.yaml line 3, column 7: mapping values are not allowed here' from a yaml.YAMLError."""
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    where = f" line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    problem = getattr(e, "problem", None) or str(e).splitlines()[0]
    context = getattr(e, "context", None)
    return f"{path}{where}: not valid YAML: {problem}" + (f" ({context})" if context else "")


def read_text(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CliError(f"{path}: is a directory, not a file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise CliError(f"{path}: cannot read it: {getattr(e, 'strerror', None) or e}") from None


def read_yaml(path: str, *, all_docs: bool = False) -> Any:
    """One YAML document (or, with ``all_docs``, the list of non-empty ones)."""
    import yaml  # only commands that read YAML pay for it

    text = read_text(path)
    try:
        if all_docs:
            return [d for d in yaml.safe_load_all(text) if d is not None]
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise CliError(yaml_problem(path, e)) from None
