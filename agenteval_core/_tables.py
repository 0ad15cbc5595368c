"""Tables for the terminal and for logs: names and words are never broken.

A terminal gets a boxed table when it fits; when it does not, one paragraph per row (wrapped
at spaces) instead of a table that folds ``tool_call_accuracy`` into ``tool_call_ac`` and
``curacy``. Output that is not a terminal (a CI log, a pipe) is laid out at ``$COLUMNS`` when
set, and otherwise as wide as the table needs: a log line may be long, a name never cut.
"""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = ["TextTable", "line_width", "show", "unscored_note"]


@dataclass
class TextTable:
    """A table of plain text cells: the first column names the row."""

    title: str
    columns: Sequence[str]
    rows: list[Sequence[str]] = field(default_factory=list)
    numeric: Sequence[str] = ()
    """Columns aligned to the right."""
    notes: list[str] = field(default_factory=list)
    """Lines printed under the table (reasons, captions), wrapped at spaces."""

    def add_row(self, *cells: str) -> None:
        self.rows.append(cells)

    def rich(self) -> Table:
        table = Table(title=self.title)
        for column in self.columns:
            table.add_column(
                column,
                justify="right" if column in self.numeric else "left",
                overflow="fold",
            )
        for row in self.rows:
            table.add_row(*row)
        return table

    def words(self) -> set[str]:
        """Every word of every cell and header: what a layout must not break."""
        return {word for row in [self.columns, *self.rows] for cell in row for word in cell.split()}


def line_width(is_terminal: bool) -> int | None:
    """The width to lay text out at: a terminal's (or ``$COLUMNS``); ``None`` (no limit) for
    a log or a pipe without ``$COLUMNS``."""
    if not is_terminal and "COLUMNS" not in os.environ:
        return None
    return shutil.get_terminal_size((80, 24)).columns


def _render(boxed: Table, width: int) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None, highlight=False)
    console.print(boxed)
    return console.file.getvalue()  # type: ignore[attr-defined]


def show(console: Console, table: TextTable) -> None:
    """Print ``table`` on ``console`` in a layout that breaks no word (see the module)."""
    boxed = table.rich()
    if line_width(console.is_terminal) is None:
        wide = Console(file=io.StringIO(), width=100_000)
        width = max(wide.measure(boxed).maximum, len(table.title))
        # console.print caps a width at the console's own (80 for a pipe): a console as wide
        # as the table, on the same file
        Console(file=console.file, width=width, color_system=None).print(boxed, highlight=False)
    else:
        rendered = _render(boxed, console.width)
        if all(word in rendered for word in table.words()):
            console.print(boxed, highlight=False)
        else:
            _show_as_paragraphs(console, table)
    for note in table.notes:
        console.print(Text(note), highlight=False)


def _show_as_paragraphs(console: Console, table: TextTable) -> None:
    """One paragraph per row, ``name: column value; column value``, for a screen too narrow
    for the table."""
    console.print(Text(table.title, style="italic"))
    for row in table.rows:
        fields = "; ".join(
            f"{column} {cell}"
            for column, cell in zip(table.columns[1:], row[1:], strict=True)
            if cell
        )
        console.print(Text(f"{row[0]}: {fields}"), highlight=False)


def unscored_note(name: str, missing: int, reasons: Mapping[str, int], unit: str) -> str | None:
    """Why ``missing`` of a metric's results (``unit``: trace, session, run) have no score:
    the commonest of ``reasons`` (text to count), and whether there were others; ``None``
    when every result has a score."""
    if not missing or not reasons:
        return None
    commonest = max(reasons, key=reasons.__getitem__).removeprefix("not scored: ")
    more = " (and other reasons)" if len(reasons) > 1 else ""
    units = unit if missing == 1 else f"{unit}s"
    return f"{name}: not scored in {missing} {units}: {commonest}{more}"
