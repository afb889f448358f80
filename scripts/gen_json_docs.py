"""Write the JSON Schema sections of docs/json-output.md from kctl's result models: each
section is what ``kctl schema COMMAND`` prints (``kctl schema envelope`` for the
envelope), between the page's markers.

    python scripts/gen_json_docs.py          # rewrite the page
    python scripts/gen_json_docs.py --check  # exit 1 when the page is stale

tests/packaging/test_json_schemas.py fails when the page and the models disagree.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DOC = REPO / "docs" / "json-output.md"
START = "<!-- json schemas: begin (scripts/gen_json_docs.py writes this part) -->"
END = "<!-- json schemas: end -->"


def sections() -> str:
    """Every result's section: ``## NAME``, a line on what it is, and its JSON Schema."""
    from kctl.cli.results import result_names, result_schema

    parts = []
    for name in result_names():
        schema = result_schema(name)
        about = f"`kctl schema {name}`" if name != "schema" else "`kctl schema` (no COMMAND)"
        parts.append(
            f"## {name}\n\n{about} prints it.\n\n```json\n{json.dumps(schema, indent=2)}\n```"
        )
    return "\n\n".join(parts)


def render(text: str) -> str:
    """``text`` (the page) with its generated part replaced by :func:`sections`."""
    found = re.search(re.escape(START) + r".*?" + re.escape(END), text, re.S)
    if found is None:
        raise SystemExit(f"{DOC}: the markers {START!r} ... {END!r} are missing")
    return text[: found.start()] + f"{START}\n{sections()}\n{END}" + text[found.end() :]


def main(argv: list[str]) -> int:
    text = DOC.read_text()
    new = render(text)
    if "--check" in argv:
        if new != text:
            print(f"{DOC} is stale: run python scripts/gen_json_docs.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
