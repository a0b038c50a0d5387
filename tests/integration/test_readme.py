"""The README and docs/ as a user reads them: every `tuner ...` line in their code blocks parses with the
real parser (tuner.cli.main.build_parser, no process spawned), every relative link leads to a file (and a
heading, where it names one), the README stays short, and it still holds the test command .ci/run runs."""
import argparse
import glob
import os
import re
import shlex

import pytest

from tuner.cli.main import build_parser

ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
README = os.path.join(ROOT, "README.md")
DOCS = sorted([README] + glob.glob(os.path.join(ROOT, "docs", "**", "*.md"), recursive=True))
SHELL_BLOCKS = {"", "bash", "sh", "shell", "console"}  # a fence's info string whose lines are commands
FENCE = re.compile(r"^\s*(```+|~~~+)\s*([\w+-]*)")
OPERATORS = {"&&", "||", ";", "|", "&", "(", ")", ">", ">>", "<", "2>", "$("}
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)|!\[[^\]]*\]\(\s*([^)\s]+)")


def _rel(path: str) -> str:
    return os.path.relpath(path, ROOT)


def _blocks(path: str):
    """(info string, first line number, lines) of each fenced code block."""
    lines = open(path, encoding="utf-8").read().splitlines()
    fence, info, start, body = None, "", 0, []
    for no, line in enumerate(lines, 1):
        m = FENCE.match(line)
        if fence is None and m:
            fence, info, start, body = m.group(1), m.group(2).lower(), no + 1, []
        elif fence is not None and line.strip().startswith(fence[0] * len(fence)) and not line.strip().strip(fence[0]):
            yield info, start, body
            fence = None
        elif fence is not None:
            body.append(line)


def _prose(path: str) -> str:
    """The file without its fenced blocks and inline code: where links live."""
    out, inside = [], None
    for line in open(path, encoding="utf-8").read().splitlines():
        m = FENCE.match(line)
        if inside is None and m:
            inside = m.group(1)[0]
        elif inside is not None and line.strip().startswith(inside * 3):
            inside = None
        elif inside is None:
            out.append(re.sub(r"`[^`]*`", "", line))
    return "\n".join(out)


def _logical_lines(block_lines: list[str], first: int):
    """(line number, text) with backslash continuations joined and console prompts removed."""
    pending, at = "", first
    for no, line in enumerate(block_lines, first):
        if not pending:
            at = no
            line = re.sub(r"^\s*[$%]\s+", "", line)
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        yield at, pending + line
        pending = ""
    if pending:
        yield at, pending


def _commands(text: str) -> list[list[str]]:
    """The simple commands of a shell line, comments dropped, split at && ; | and redirections."""
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: prose in a plain block, not a command
        tokens = text.split("#", 1)[0].split()
    commands, current = [], []
    for tok in tokens:
        if tok in OPERATORS or set(tok) <= set("&|;()<>"):
            commands.append(current)
            current = []
        else:
            current.append(tok)
    commands.append(current)
    return [c for c in commands if c]


def tuner_invocations():
    """(where, argv after `tuner`) for every tuner command in a shell-like code block of the docs."""
    found = []
    for path in DOCS:
        for info, first, body in _blocks(path):
            if info not in SHELL_BLOCKS:
                continue
            for no, line in _logical_lines(body, first):
                if not re.search(r"(^|[\s;&|(/])tuner\s", line):
                    continue
                for words in _commands(line):
                    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=\S*", words[0]):  # VAR=value prefix
                        words = words[1:]
                    if words and (words[0] == "tuner" or words[0].endswith("/tuner")):
                        found.append((f"{_rel(path)}:{no}", words[1:]))
    return found


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {s for action in parser._actions for s in action.option_strings}


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(words: list[str]) -> list[str]:
    """The --options of a command line, as written: `[--model PATH]` counts, `--out=DIR` is --out."""
    flags = []
    for word in words:
        word = word.strip("[]")
        if re.match(r"--[A-Za-z]", word):
            flags.append(word.split("=", 1)[0])
    return flags


INVOCATIONS = tuner_invocations()


def test_the_docs_show_tuner_commands():
    assert len(INVOCATIONS) >= 20, INVOCATIONS  # the extraction finds the tour, the studies, the backends
    assert {"tune", "status", "report", "export"} <= {argv[0] for _, argv in INVOCATIONS if argv}


def test_every_tuner_command_in_the_docs_parses():
    parser = build_parser()
    commands = _subparsers(parser)
    wrong = []
    for where, argv in INVOCATIONS:
        if not argv or argv[0].startswith("-"):  # `tuner --version`, `tuner --help`
            wrong += [f"{where}: tuner {f} is no option" for f in _flags(argv) if f not in _options(parser)]
            continue
        if argv[0] not in commands:
            wrong.append(f"{where}: `tuner {argv[0]}` is no command (commands: {', '.join(sorted(commands))})")
            continue
        known = _options(commands[argv[0]])
        wrong += [f"{where}: `tuner {argv[0]}` has no option {f}" for f in _flags(argv[1:]) if f not in known]
    assert wrong == [], "\n".join(wrong)


def test_the_command_check_catches_a_wrong_command_and_a_wrong_flag():
    commands = _subparsers(build_parser())
    assert "tune" in commands and "tunes" not in commands
    assert "--n-trials" in _options(commands["tune"]) and "--trials" not in _options(commands["tune"])
    argv = _commands("tuner worker --study s --storage $DB [--model /m.onnx] --out=x  # --not-this")[0]
    assert argv[0] == "tuner" and _flags(argv[2:]) == ["--study", "--storage", "--model", "--out"]


def _slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped, spaces to dashes."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"\s", "-", re.sub(r"[^\w\- ]", "", text))


def _anchors(path: str) -> set[str]:
    """The anchors of a Markdown file's headings (outside code blocks); a repeated heading gets -1, -2..."""
    seen, anchors, inside = {}, set(), None
    for line in open(path, encoding="utf-8").read().splitlines():
        m = FENCE.match(line)
        if inside is None and m:
            inside = m.group(1)[0]
            continue
        if inside is not None:
            if line.strip().startswith(inside * 3):
                inside = None
            continue
        h = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if h:
            slug = _slug(h.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            anchors.add(slug if n == 0 else f"{slug}-{n}")
    return anchors


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_every_relative_link_in_the_docs_leads_to_a_file(path):
    broken = []
    for m in LINK.finditer(_prose(path)):
        target = m.group(1) or m.group(2)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = os.path.normpath(os.path.join(os.path.dirname(path), file_part)) if file_part else path
        if not os.path.exists(dest):
            broken.append(f"{target}: no {_rel(dest)}")
        elif anchor and dest.endswith(".md") and anchor.lower() not in _anchors(dest):
            broken.append(f"{target}: {_rel(dest)} has no heading #{anchor}")
    assert broken == [], "\n".join(broken)


def test_the_readme_stays_short():
    with open(README, encoding="utf-8") as f:
        assert len(f.read().splitlines()) < 150


def test_the_readme_holds_the_set_up_and_test_commands_ci_runs():
    blocks = [line.strip() for info, _, body in _blocks(README) if info in SHELL_BLOCKS for line in body]
    assert "python3 -m venv .venv && . .venv/bin/activate && pip install -e . && tuner demo" in blocks
    assert "bash .ci/run" in blocks
    ci = open(os.path.join(ROOT, ".ci", "run"), encoding="utf-8").read()
    runs = [line.strip() for line in ci.splitlines() if re.match(r"\s*python -m pytest\b", line)]
    assert runs, ".ci/run runs no `python -m pytest` line"
    readme = open(README, encoding="utf-8").read()
    assert [r for r in runs if f"`{r}`" not in readme] == []  # the README says what CI runs, word for word
