#!/usr/bin/env python3
"""Rewrite the line counts of docs/design.md's map of the package (and its total) from the files.

    python tools/design_map.py [--check]

The map lists every file of opclass/ with its length (``wc -l``) and one line on its job;
``tests/test_layers.py`` fails when a count is wrong or a file is missing. This script fixes
the counts (a new file still needs its line written by hand); ``--check`` only reports.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DESIGN = ROOT / "docs" / "design.md"
PACKAGE = ROOT / "opclass"


def main(argv: list[str]) -> int:
    text = DESIGN.read_text()
    head, rest = text.split("```text\nopclass/", 1)
    block, tail = rest.split("```", 1)
    folder, lines, seen = "", [], set()
    for line in block.splitlines(keepends=True):
        m = re.match(r"^( +)(\S+)(\s+)(\d+)(\s.*)?$", line.rstrip("\n"))
        if m is None:
            lines.append(line)
            continue
        name = m.group(2)
        if "/" in name:
            folder = name.split("/")[0]
        rel = name if "/" in name or len(m.group(1)) <= 2 else f"{folder}/{name}"
        path = PACKAGE / rel
        if not path.exists():
            print(f"design.md lists {rel}, which is gone", file=sys.stderr)
            lines.append(line)
            continue
        seen.add(rel)
        count = str(len(path.read_text().splitlines()))
        width = len(m.group(3)) + len(m.group(4))
        lines.append(f"{m.group(1)}{name}{count.rjust(width)}{m.group(5) or ''}\n")
    files = {str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*") if p.suffix in (".py", ".cpp")}
    for rel in sorted(files - seen):
        print(f"design.md does not list {rel}: write its line by hand", file=sys.stderr)
    total = sum(len(p.read_text().splitlines()) for p in PACKAGE.rglob("*.py"))
    new = re.sub(r"\d[\d,]* lines of Python", f"{total:,} lines of Python", head + "```text\nopclass/" + "".join(lines) + "```" + tail, count=1)
    if "--check" in argv:
        print("up to date" if new == text else "counts differ")
        return 0 if new == text else 1
    DESIGN.write_text(new)
    print(f"{total:,} lines of Python in opclass/")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
