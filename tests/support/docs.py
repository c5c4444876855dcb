"""The shell blocks of the README and docs/, and what checks them (tests/unit/test_docs.py, and
tests/e2e/test_docs_tour.py, which runs the README's runnable blocks).

A fenced `sh` block is either runnable (```` ```sh runnable ````: the tour test runs it, in order,
against the test session's clusters) or names, on the line just before it, what runs the commands it
shows: `<!-- tested by: tests/e2e/test_x.py::test_y, tests/conftest.py::fixture -->` (a test or
fixture function that must exist) or a script that contains the commands (`<!-- tested by: .ci/run -->`).
Every `liqo-stack ...` command in a block must parse against the real command line.

Markdown is read with a few regular expressions: fenced blocks and one comment form are all we need,
so no markdown library is added for it.
"""

from __future__ import annotations

import ast
import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click

REPO = Path(__file__).resolve().parents[2]
SHELLS = {"sh", "bash", "shell"}
RUNNABLE = "runnable"
# Runnable blocks are run by tests/e2e/test_docs_tour.py, which reads this file only.
RUNNABLE_IN = "README.md"

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>```+|~~~+)(?P<info>.*)$")
_TESTED_BY = re.compile(r"^\s*<!--\s*tested by:\s*(?P<targets>.+?)\s*-->\s*$")
_SUBSTITUTION = re.compile(r"\$\(([^()]*)\)")


@dataclass
class Block:
    path: Path
    line: int  # of the opening fence, 1-based
    info: str
    text: str
    tested_by: list[str] = field(default_factory=list)

    @property
    def language(self) -> str:
        return self.info.split()[0] if self.info.split() else ""

    @property
    def is_shell(self) -> bool:
        return self.language in SHELLS

    @property
    def runnable(self) -> bool:
        return RUNNABLE in self.info.split()[1:]

    @property
    def where(self) -> str:
        try:
            shown = self.path.relative_to(REPO)
        except ValueError:
            shown = self.path
        return f"{shown}:{self.line}"


def documents() -> list[Path]:
    """The README and every page under docs/."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def blocks(path: Path, text: str | None = None) -> list[Block]:
    """The fenced code blocks of a markdown file, each with the tests named just before it."""
    lines = (path.read_text() if text is None else text).splitlines()
    found: list[Block] = []
    index = 0
    while index < len(lines):
        opening = _FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, indent = opening["fence"], len(opening["indent"])
        body: list[str] = []
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            body.append(lines[end][indent:] if lines[end][:indent].strip() == "" else lines[end])
            end += 1
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        named = _TESTED_BY.match(previous)
        targets = [t.strip() for t in named["targets"].split(",") if t.strip()] if named else []
        found.append(Block(path, index + 1, opening["info"].strip(), "\n".join(body), targets))
        index = end + 1
    return found


def command_lines(text: str) -> list[str]:
    """The block's commands, one per line: continuations joined, comments and blank lines dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line.strip() for line in joined.splitlines() if line.strip() and not line.strip().startswith("#")]


def simple_commands(line: str) -> Iterator[list[str]]:
    """The simple commands of a shell line (split at `&&`, `||`, `;`, `|`, `&`), those inside `$(...)` too."""
    for inner in _SUBSTITUTION.findall(line):
        yield from simple_commands(inner)
    lexer = shlex.shlex(_SUBSTITUTION.sub("SUBSTITUTED", line), posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    command: list[str] = []
    for token in lexer:
        if token and set(token) <= set(";&|"):
            if command:
                yield command
            command = []
        else:
            command.append(token)
    if command:
        yield command


def liqo_stack_invocations(text: str) -> list[list[str]]:
    """The arguments of every `liqo-stack` (or `.venv/bin/liqo-stack`) command of a shell block."""
    found = []
    for line in command_lines(text):
        for command in simple_commands(line):
            words = [w for w in command]
            while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
                words = words[1:]  # VAR=value before the command
            if words and Path(words[0]).name == "liqo-stack":
                found.append(words[1:])
    return found


def cli_error(args: list[str]) -> str | None:
    """None when `liqo-stack ARGS` parses against the real command line (nothing is executed), else why not."""
    from liqo_stack.operating.cli import main

    command: click.Command = main
    name = "liqo-stack"
    rest = list(args)
    parent: click.Context | None = None
    try:
        while True:
            ctx = command.make_context(name, rest, parent=parent)
            if not isinstance(command, click.Group):
                return None
            remaining = [*ctx._protected_args, *ctx.args]
            if not remaining:
                return f"`{ctx.command_path}` needs a command ({', '.join(command.list_commands(ctx))})"
            sub_name, sub, rest = command.resolve_command(ctx, remaining)
            if sub is None or sub_name is None:
                return f"`{ctx.command_path}` has no command {remaining[0]!r}"
            command, name, parent = sub, sub_name, ctx
    except click.exceptions.Exit as done:
        return None if done.exit_code == 0 else f"exits {done.exit_code}"
    except click.ClickException as err:
        message = err.format_message()
        return "needs a command" if message.startswith("Usage:") else message  # a group given no command


def _defined(path: Path, name: str) -> bool:
    tree = ast.parse(path.read_text())
    *owners, function = name.split("::")
    scope: list[ast.stmt] = tree.body
    for owner in owners:
        classes = [n for n in scope if isinstance(n, ast.ClassDef) and n.name == owner]
        if not classes:
            return False
        scope = classes[0].body
    return any(isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef) and n.name == function for n in scope)


def _normalised(text: str) -> str:
    return " ".join(text.replace("./", "").split())


def target_error(target: str, block: Block, repo: Path = REPO) -> str | None:
    """None when a `tested by` target exists: a test (or fixture) function, or a script holding the commands."""
    file, sep, function = target.partition("::")
    path = repo / file
    if not path.is_file():
        return f"{target}: no file {file}"
    if sep:
        if not _defined(path, function):
            return f"{target}: {file} defines no {function}"
        return None
    script = _normalised(path.read_text())
    missing = [line for line in command_lines(block.text) if _normalised(line) not in script]
    return f"{target} does not run {missing[0]!r}" if missing else None


def block_problems(block: Block, repo: Path = REPO, runnable_in: Path | None = None) -> list[str]:
    """What is wrong with a shell block: an unparsable `liqo-stack` command, no runner, a runner that is gone."""
    if not block.is_shell:
        return []
    problems = []
    for args in liqo_stack_invocations(block.text):
        error = cli_error(args)
        if error:
            problems.append(f"{block.where}: `liqo-stack {shlex.join(args)}`: {error}")
    if block.runnable:
        if block.path != (runnable_in or repo / RUNNABLE_IN):
            problems.append(
                f"{block.where}: marked runnable, but only {RUNNABLE_IN}'s runnable blocks are run "
                "(tests/e2e/test_docs_tour.py): name the test that runs it instead"
            )
    elif not block.tested_by:
        problems.append(
            f"{block.where}: a shell block must be fenced ```sh runnable (the docs tour test runs it) or be preceded "
            "by <!-- tested by: tests/<file>.py::<test> --> naming the test that runs what it shows"
        )
    for target in block.tested_by:
        error = target_error(target, block, repo)
        if error:
            problems.append(f"{block.where}: tested by {error}")
    return problems


def runnable_blocks(path: Path | None = None) -> list[Block]:
    """The runnable shell blocks of the README, in order (the tour)."""
    return [b for b in blocks(path or REPO / RUNNABLE_IN) if b.is_shell and b.runnable]
