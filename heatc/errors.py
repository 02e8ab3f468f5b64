"""Errors a user can act on: where (file:line:col), the line with a caret, and what was
expected. Every failure caused by bad input is a `HeatError`; the CLI prints it without a
traceback."""

from __future__ import annotations

import difflib
import functools
from dataclasses import dataclass, field


@dataclass
class Diagnostic:
    path: str
    line: int  # 1-based; 0 when the message is about the whole file
    column: int  # 1-based
    message: str
    source_line: str | None = None
    notes: list[str] = field(default_factory=list)

    def render(self) -> str:
        where = f"{self.path}:{self.line}:{self.column}" if self.line else self.path
        out = [f"{where}: error: {self.message}"]
        if self.source_line is not None and self.line:
            text, column = _window(self.source_line.rstrip("\n"), self.column)
            gutter = f"{self.line:>5} | "
            out.append(gutter + text)
            out.append(" " * (len(gutter) - 2) + "| " + _caret_pad(text, column) + "^")
        out.extend(f"  note: {n}" for n in self.notes)
        return "\n".join(out)


SHOWN_LINE = 160  # the most characters of a source line an error shows (around the column)


def _window(line: str, column: int) -> tuple[str, int]:
    """The part of a long line around `column` (marked with … where cut), and the column in it."""
    if len(line) <= SHOWN_LINE:
        return line, column
    start = max(0, min(column - 1 - SHOWN_LINE // 2, len(line) - SHOWN_LINE))
    end = start + SHOWN_LINE
    text = ("…" if start else "") + line[start:end] + ("…" if end < len(line) else "")
    return text, column - start + (1 if start else 0)


def _caret_pad(line: str, column: int) -> str:
    # Keep tabs so the caret lines up under tab-indented text; wide (CJK) characters take
    # two terminal cells.
    pad = []
    for ch in line[: max(column - 1, 0)]:
        if ch == "\t":
            pad.append("\t")
        elif _is_wide(ch):
            pad.append("  ")
        else:
            pad.append(" ")
    return "".join(pad)


def _is_wide(ch: str) -> bool:
    import unicodedata

    return unicodedata.east_asian_width(ch) in ("W", "F")


class HeatError(Exception):
    """One or more diagnostics about user input."""

    def __init__(self, diagnostics: list[Diagnostic] | Diagnostic):
        if isinstance(diagnostics, Diagnostic):
            diagnostics = [diagnostics]
        self.diagnostics = diagnostics
        super().__init__(self.render())

    def render(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)


class SourceText:
    """A source file's text, for attaching lines to diagnostics."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text

    @functools.cached_property
    def lines(self) -> list[str]:
        return self.text.splitlines()  # (only when a diagnostic needs them: a large input is split once)

    def diagnostic(self, line: int, column: int, message: str, notes: list[str] | None = None) -> Diagnostic:
        src = self.lines[line - 1] if 0 < line <= len(self.lines) else None
        return Diagnostic(self.path, line, column, message, src, list(notes or []))


def suggestion_notes(name: str, candidates) -> list[str]:
    """A diagnostic's note naming the closest candidate to a misspelt name, or none."""
    close = difflib.get_close_matches(name, list(candidates), n=1, cutoff=0.6)
    return [f'did you mean "{close[0]}"?'] if close else []
