"""Click-stream page views: generate → parse/enrich → count per page → JSONL files.

The main job of ``make demo``. Every input record is a deterministic function of its
index, so :func:`reference` recomputes the exact expected output in plain Python.

Configured by pipeline settings (``spillway run ... --conf clicks.records=N``), each
falling back to an environment variable, read when the pipeline is built, on the driver
and in every task: ``clicks.records`` / ``CLICKS_RECORDS`` (default 1,000,000;
``unbounded`` for an endless stream), ``clicks.out`` / ``CLICKS_OUT`` (output directory),
``clicks.parallelism`` / ``CLICKS_PARALLELISM`` (default 2), ``clicks.rate`` /
``CLICKS_RATE`` (records/s per source subtask; unset or empty: as fast as possible),
``clicks.chaining`` / ``CLICKS_CHAINING`` (``1``: fuse clicks→enrich and count→out,
leaving one channel: see ``Pipeline(chaining=True)``). Settings travel with the job to
every task; the variables reach tasks because the runtime forwards ``CLICKS_*`` too.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import xxhash

from spillway import Pipeline, avro_schema, conf


@dataclass(slots=True)
class Click:
    """One generated click."""

    seq: int
    user: int
    url: str
    ts: int


@dataclass(slots=True)
class PageView:
    """A click parsed into page and section."""

    page: str
    section: str
    user: int


@dataclass(slots=True)
class PageCount:
    """The output row of one page."""

    page: str
    section: str
    views: int


# The channels' Avro schemas, made from the types: for tools that decode channel topics.
CLICK, PAGE_VIEW, PAGE_COUNT = (
    avro_schema(t, where="clicks example") for t in (Click, PageView, PageCount)
)
SECTIONS = ("news", "sport", "shop", "help", "blog")


def make_click(i: int) -> Click:
    """Click number ``i``: a fixed function of ``i`` (so reruns and references agree)."""
    h = xxhash.xxh64_intdigest(i.to_bytes(8, "little"))
    section = SECTIONS[h % 5]
    return Click(
        seq=i,
        user=(h >> 8) % 20_000,
        url=f"https://example.com/{section}/{(h >> 24) % 400}?ref={(h >> 40) % 7}",
        ts=1_700_000_000_000 + i,
    )


def enrich(click: Click) -> PageView:
    """Parse the URL into page and section, drop the query string."""
    path = click.url.split("://", 1)[1].split("?", 1)[0]
    _, section, page = path.split("/", 2)
    return PageView(page=f"/{section}/{page}", section=section, user=click.user)


def count_result(page: str, acc: list[Any]) -> PageCount:
    """The output row of one page."""
    return PageCount(page=page, section=acc[0], views=acc[1])


def add_view(acc: list[Any], view: PageView) -> list[Any]:
    """Fold one view into ``[section, views]``."""
    return [view.section, acc[1] + 1]


def build(
    records: int | None,
    out_dir: str,
    parallelism: int = 2,
    rate: float | None = None,
    chaining: bool = False,
) -> Pipeline:
    """The click pipeline over ``records`` generated clicks, writing to ``out_dir``."""
    p = Pipeline("clicks", chaining=chaining, env_prefixes=("CLICKS_",))
    # Schemas come from the annotations: make_click -> Click, enrich -> PageView,
    # count_result -> PageCount. Key functions see records as dicts (see
    # spillway.spark_jobs.records.records).
    clicks = p.generate(
        "clicks", make=make_click, count=records, parallelism=parallelism, rate=rate
    )
    views = clicks.map("enrich", enrich)
    counts = views.key_by(lambda v: v["page"]).aggregate(
        "count",
        init=lambda: ["", 0],
        add=add_view,
        result=count_result,
        # A bounded run emits one final row per page; an endless one, a row per update.
        emit="final" if records is not None else "updates",
    )
    counts.write_jsonl("out", out_dir)
    return p


def setting(name: str, default: str) -> str:
    """Pipeline setting ``clicks.<name>`` (``--conf``), else ``$CLICKS_<NAME>``, else
    ``default``."""
    return conf(f"clicks.{name}", os.environ.get(f"CLICKS_{name.upper()}", default))


def pipeline() -> Pipeline:
    """The pipeline as configured by its settings (see the module docstring)."""
    rate = setting("rate", "")
    records = setting("records", "1000000")
    return build(
        None if records == "unbounded" else int(records),
        setting("out", ".spillway/out/clicks"),
        int(setting("parallelism", "2")),
        float(rate) if rate else None,
        setting("chaining", "0") == "1",
    )


def reference(records: int) -> dict[str, tuple[str, int]]:
    """Batch computation of the same result: page → (section, views)."""
    views: Counter[str] = Counter()
    sections: dict[str, str] = {}
    for i in range(records):
        v = enrich(make_click(i))
        views[v.page] += 1
        sections[v.page] = v.section
    return {page: (sections[page], n) for page, n in views.items()}
