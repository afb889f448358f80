"""The house table style and the ``--json`` envelope (pure: values in, strings out). The
envelope is versioned; scripts should check ``schema``. The text of each command's result
is :mod:`kctl.cli.text`'s.

Tables are :class:`rich.table.Table` values built by :func:`table`. :func:`to_text` turns
one into plain ASCII (no colour, no box-drawing characters: what piped output, logs, the
``--json`` envelope and tests see). Printed through a ``rich.console.Console`` instead,
the same table gets colour on a terminal, and none when ``NO_COLOR`` is set or the
output is not a terminal (rich decides).
"""

from __future__ import annotations

import dataclasses
import io
import json
import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from rich.box import Box
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from kctl import __version__

JSON_SCHEMA = "kctl.result/v1"

#: the house table style: a dashed rule under the header, columns apart by spaces; ASCII
#: only, so it reads the same in a terminal, a log file and a CI page
RULED = Box("    \n    \n -  \n    \n    \n    \n    \n    \n", ascii=True)
#: wide enough that no table is wrapped in text form
TEXT_WIDTH = 400

Justify = Literal["left", "right"]
#: the style of a verdict or result word when printed in colour
VERDICT_STYLES = {
    "PASS": "green",
    "FAIL": "bold red",
    "INCONCLUSIVE": "yellow",
    "UNCLEAR": "yellow",
    "SKIPPED": "dim",
    "info": "dim",
}


def table(*columns: tuple[str, Justify]) -> Table:
    """An empty table with these ``(header, justify)`` columns in the house style."""
    t = Table(box=RULED, show_edge=False, pad_edge=False, header_style="bold", highlight=False)
    for header, justify in columns:
        t.add_column(header, justify=justify, no_wrap=True)
    return t


def cell(value: object, style: str = "") -> Text:
    """A table cell that shows ``value`` as it is (no rich markup read in it); None
    shows as ``-``."""
    return Text("-" if value is None else str(value), style=style)


def verdict_cell(value: str | None) -> Text:
    """A verdict word, coloured by its meaning when printed on a terminal."""
    word = "-" if value is None else value
    return cell(word, VERDICT_STYLES.get(word.split(" ")[0], ""))


def to_text(renderable: RenderableType) -> str:
    """Plain ASCII text of a table: no colour and no trailing spaces."""
    buf = io.StringIO()
    console = Console(
        file=buf,
        width=TEXT_WIDTH,
        color_system=None,
        force_terminal=False,
        no_color=True,
        highlight=False,
        markup=False,
        emoji=False,
    )
    console.print(renderable)
    return "\n".join(line.rstrip() for line in buf.getvalue().splitlines())


def _finite(value: Any) -> Any:
    """``value`` with every NaN or infinity replaced by None: the envelope is strict JSON
    (``json.dumps`` would write the non-standard ``NaN``, which most parsers refuse)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class ErrorInfo(BaseModel):
    """What went wrong, and how to fix it."""

    model_config = ConfigDict(extra="forbid")

    type: str = Field(description="the error class: CandidateRejected, ProfileError, LockHeld ...")
    message: str
    hint: str | None = Field(description="what to do about it")


class Envelope(BaseModel):
    """The one JSON document ``--json`` prints on stdout, whatever happens."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    format: Literal["kctl.result/v1"] = Field(default="kctl.result/v1", alias="schema")
    kctl_version: str
    command: str = Field(description="deploy, status, lock show ...")
    ok: bool = Field(description="exit_code == 0")
    exit_code: int
    result: Any = Field(
        description="the command's result (`kctl schema COMMAND`); null on most errors; a "
        "rejected deploy's result on exit 3"
    )
    error: ErrorInfo | None


def dump(result: Any) -> Any:
    """A command's result as JSON values: a model's (or a dataclass's, or a list of
    them) dump, strict JSON (no NaN), anything the models do not type written as its
    ``str``."""
    if isinstance(result, BaseModel):
        result = result.model_dump(mode="json", by_alias=True, fallback=str)
    elif dataclasses.is_dataclass(result) and not isinstance(result, type):
        result = TypeAdapter(type(result)).dump_python(result, mode="json", fallback=str)
    elif isinstance(result, (list, tuple)):
        return [dump(item) for item in result]
    return _finite(result)


def envelope(
    command: str,
    *,
    ok: bool,
    exit_code: int,
    result: Any = None,
    error: ErrorInfo | None = None,
) -> str:
    doc = Envelope(
        kctl_version=__version__,
        command=command,
        ok=ok,
        exit_code=exit_code,
        result=dump(result),
        error=error,
    )
    return json.dumps(
        doc.model_dump(mode="json", by_alias=True, fallback=str),
        indent=2,
        sort_keys=False,
        default=str,
        allow_nan=False,
    )
