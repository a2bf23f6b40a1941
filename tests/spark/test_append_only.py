"""The README's example pipeline (append-only silver, a SQL gold) declared in a scratch
folder and run: every valid event once, expectations counted, gold per day and page."""

from __future__ import annotations

import json
from collections import Counter
from datetime import date
from pathlib import Path

from tests.lake import Lake
from tests.readme import readme_example


def view(
    event_id: str | int, page: str, at: str, user: str | None = None, **extra: object
) -> bytes:
    record: dict[str, object] = {"event_id": event_id, "page": page, "viewed_at": at, **extra}
    if user is not None:
        record["user_id"] = user
    return json.dumps(record).encode()


def test_the_readme_pipeline_keeps_each_event_once(lake: Lake, tmp_path: Path) -> None:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "page_views.py").write_text(readme_example("page_views.py"))
    lake.monkeypatch.setenv("LAKEHOUSE_PIPELINES_DIR", str(folder))

    first = [
        view("v1", "/home", "2026-11-02T10:00:00Z", "u1"),
        view("v2", "/home", "2026-11-02T23:59:59Z", "u2", duration_ms=4_000_000),
        view(3, "/cart", "2026-11-03T00:00:00+01:00", "u1"),  # 2026-11-02 in UTC
        view("v4", "/home", "2026-11-03T08:00:00Z", "bot-7"),  # dropped
        b'{"event_id": "v5", "page": "", "viewed_at": "2026-11-03T08:00:00Z"}',  # empty page
        b"not json",
    ]
    second = [
        view("v1", "/home", "2026-11-02T10:00:00Z", "u1"),  # delivered again
        view("v6", "/cart", "2026-11-03T09:00:00Z"),
    ]
    for lines in (first, second):
        lake.land(lines, pipeline="page_views")
        for layer in ("bronze", "silver", "gold"):
            assert lake.run(layer, pipeline="page_views") == 0

    assert sorted(r[0] for r in lake.rows("silver/page_views", ["event_id"])) == [
        "3", "v1", "v2", "v6",
    ]  # fmt: skip
    assert Counter(r[0] for r in lake.rows("silver/page_views_quarantine", ["reason"])) == {
        "empty:page": 1,
        "not_json": 1,
    }
    assert sorted(lake.rows("gold/page_views_daily", ["day", "page", "views"])) == [
        (date(2026, 11, 2), "/cart", 1),
        (date(2026, 11, 2), "/home", 2),
        (date(2026, 11, 3), "/cart", 1),
    ]
    counted: Counter[str] = Counter()
    for (details,) in lake.rows("ops/run_log", ["details"]):
        for rule, figures in (json.loads(details).get("expectations") or {}).items():
            counted[rule] += figures["records"]
    assert counted == {"bot": 1, "long_view": 1}
