"""The README's pipeline example runs as written: its code block, executed and driven
in-process by spillway.testing, counts every generated view once, per page and minute."""

from __future__ import annotations

import re
import sys
import types
from collections import Counter
from pathlib import Path

from spillway.testing import TestDriver

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_module() -> types.ModuleType:
    (code,) = re.findall(r"```python\n(# pages\.py\n.*?)```", README.read_text(), re.S)
    module = types.ModuleType("readme_pages")
    sys.modules[module.__name__] = module  # dataclasses look their module up there
    exec(compile(code, "README.md:pages.py", "exec"), module.__dict__)
    return module


def test_the_readme_pipeline_counts_views_per_page_and_minute() -> None:
    pages = readme_module()
    t = TestDriver(pages.pipeline())
    t.run_source("views")
    t.end()
    got = Counter({(r["page"], r["start"]): r["views"] for r in t.output("out")})
    want: Counter[tuple[str, int]] = Counter()
    for i in range(100_000):
        view = pages.make_view(i)
        want[(view.page, view.ts - view.ts % 60_000)] += 1
    assert got == want
    assert len(t.output("out")) == len(want)  # one row per page and minute, no repeats
