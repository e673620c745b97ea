"""`mai report` over a real store, opened in real headless Chromium (Debian's /usr/bin/chromium, driven by
Playwright; `make test` installs it): no console error, no request leaves the file, every chart has drawn marks,
the trace browser's filters show the samples the views say they should, and the "score changed" filter shows
exactly the samples whose scores differ in the `scores` view. The test takes a screenshot of each section into a
temporary folder; `make docs-screenshots` runs it with MAI_REPORT_SCREENSHOTS=docs/report to renew the pictures the
README shows (tests never write tracked files)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.report_store import LIMIT, Store, report_store

pytestmark = pytest.mark.prefect

CHROMIUM = Path(os.environ.get("MAI_CHROMIUM", "/usr/bin/chromium"))
# playwright-core-like launch of the system browser: nothing is downloaded, nothing phones home
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SECTIONS = ["figure-1", "paper-tables", "routing-funnel", "s2", "layer-sweep", "latency", "policy-lab", "runs",
            "compare", "traces"]
CHARTED = ["figure-1", "routing-funnel", "s2", "layer-sweep", "latency", "policy-lab", "compare"]  # tables only: the rest


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory, prefect_server: str, assets_home: Path,
          shapes_dataset: Path) -> Store:
    return report_store(tmp_path_factory, assets_home, shapes_dataset)


PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def screenshots(tmp_path: Path) -> Path:
    """Where a test's section screenshots go: a temporary folder, or MAI_REPORT_SCREENSHOTS (`make
    docs-screenshots` points it at docs/report/, the pictures the README shows)."""
    folder = Path(os.environ.get("MAI_REPORT_SCREENSHOTS") or tmp_path / "screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def assert_pictures(folder: Path, names: list[str]) -> None:
    """Each screenshot is a PNG with something in it."""
    for name in names:
        data = (folder / name).read_bytes()
        assert data.startswith(PNG_SIGNATURE) and len(data) > 1000, name


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    assert CHROMIUM.is_file(), f"{CHROMIUM} is missing: `make test` installs Debian's chromium (apt-get)"
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def _sql(store: Store, sql: str, params: list[object]) -> list[tuple[Any, ...]]:
    from mai.storage.catalog import connect
    from mai.storage.paths import Home

    with connect(Home.at(store.home)) as connection:
        return connection.execute(sql, params).fetchall()


def _count(page: Any) -> int:
    return int(page.get_attribute("#trace-count", "data-count"))


def _all_visible_ids(page: Any) -> list[str]:
    """Every matching sample, page by page."""
    ids: list[str] = []
    while True:
        ids += [card.get_attribute("data-sample") for card in page.query_selector_all("#trace-list .trace-card")]
        if page.text_content("#tf-page") == page.text_content("#tf-pages"):
            return ids
        page.click("#tf-next")


@pytest.mark.browser
def test_report_in_headless_chromium(store: Store, browser: Any, tmp_path: Path, screenshots: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    from mai.cli import main

    out = tmp_path / "report.html"
    small_s, cascade = store.runs["small_s"], store.runs["cascade"]
    assert main(["--home", str(store.home), "report", "--all", "--compare", small_s, cascade, "--out", str(out),
                 "--json"]) == 0
    built = json.loads(capsys.readouterr().out)
    assert built["sections"] == SECTIONS and built["runs"] == len(store.runs) and built["trace_samples"] == LIMIT
    assert built["bytes"] == out.stat().st_size < 10_000_000
    text = out.read_text()
    assert "<script src" not in text and "<link" not in text  # every script and style is inlined

    page = browser.new_page(viewport={"width": 1280, "height": 900})
    problems: list[str] = []
    requests: list[str] = []
    page.on("console", lambda message: problems.append(message.text) if message.type == "error" else None)
    page.on("pageerror", lambda error: problems.append(str(error)))
    page.on("request", lambda request: requests.append(request.url))
    page.goto(out.as_uri())
    page.wait_for_function("[...document.querySelectorAll('.chart')].every(c => c.dataset.drawn !== undefined)",
                           timeout=30_000)
    assert problems == []
    assert [url for url in requests if url != out.as_uri() and not url.startswith("data:")] == []

    sections = page.eval_on_selector_all("section", "s => s.map(x => x.id)")
    assert sections == SECTIONS
    for key in CHARTED:
        drawn = page.eval_on_selector_all(f"#{key} .chart", "cs => cs.map(c => Number(c.dataset.drawn))")
        assert drawn and all(n > 0 for n in drawn), (key, drawn)
        assert page.eval_on_selector(f"#{key} .chart .main-svg", "svg => svg.getBoundingClientRect().height") > 100

    runs = page.evaluate("JSON.parse(document.getElementById('trace-data').textContent).runs.map(r => r.id)")
    assert sorted(runs) == sorted(store.runs.values())
    assert _count(page) == LIMIT and len(page.query_selector_all(".trace-card")) == min(LIMIT, 20)

    # one run: its routes, categories and wrong answers, as the views hold them
    page.select_option("#tf-run", str(runs.index(cascade)))
    routes = dict(_sql(store, "SELECT route, count(*) FROM routes WHERE run_id = ? GROUP BY 1", [cascade]))
    for route in ("MV1", "MV2", "RT"):
        page.select_option("#tf-route", route)
        assert _count(page) == routes.get(route, 0), route
    page.select_option("#tf-route", "")
    (counting,), = _sql(store, "SELECT count(*) FROM routes WHERE run_id = ? AND category = 'counting'", [cascade])
    page.select_option("#tf-category", "counting")
    assert _count(page) == counting > 0
    page.select_option("#tf-category", "")
    (wrong,), = _sql(store, "SELECT count(*) FROM scores WHERE run_id = ? AND score < 0.5", [cascade])
    page.select_option("#tf-correct", "wrong")
    assert _count(page) == wrong > 0
    page.select_option("#tf-correct", "")

    # score changed between run A and run B: exactly the samples whose scores differ in the scores view
    changed = sorted(sid for (sid,) in _sql(
        store, "SELECT a.sample_id FROM scores a JOIN scores b USING (sample_id, scorer_profile) "
               "WHERE a.run_id = ? AND b.run_id = ? AND a.score <> b.score", [small_s, cascade]))
    assert changed
    page.select_option("#tf-run", "")
    page.select_option("#tf-a", str(runs.index(small_s)))
    page.select_option("#tf-b", str(runs.index(cascade)))
    page.check("#tf-changed")
    assert _count(page) == len(changed)
    assert sorted(_all_visible_ids(page)) == changed
    page.select_option("#tf-b", str(runs.index(store.runs["large_s"])))
    other = {sid for (sid,) in _sql(store, "SELECT a.sample_id FROM scores a JOIN scores b USING (sample_id, "
                                           "scorer_profile) WHERE a.run_id = ? AND b.run_id = ? AND a.score <> b.score",
                                    [small_s, store.runs["large_s"]])}
    assert _count(page) == len(other)
    page.uncheck("#tf-changed")

    # a run's traces: every stage it used, with the reasoning text
    page.select_option("#tf-run", str(runs.index(cascade)))
    page.select_option("#tf-route", "RT")
    stages = page.eval_on_selector_all("#trace-list .trace-card:first-child .stage-head", "s => s.map(x => x.textContent)")
    assert [s.split(":")[0] for s in stages] == ["large S (MV1)", "small S (MV1)", "small R", "large RT"]
    assert len(page.text_content("#trace-list .trace-card:first-child pre:nth-of-type(1)") or "") > 0

    page.mouse.move(0, 0)  # no hover state (Plotly's toolbar) in the pictures
    for key in SECTIONS:
        page.locator(f"#{key}").screenshot(path=str(screenshots / f"{key}.png"))
    page.close()
    assert_pictures(screenshots, [f"{key}.png" for key in SECTIONS])


def test_report_refuses_unknown_runs(store: Store, tmp_path: Path) -> None:
    from mai import api
    from mai.errors import ConfigError

    with pytest.raises(ConfigError, match="no completed run 'nope'"):
        api.report(["nope"], out=tmp_path / "r.html", home=store.home)
    with pytest.raises(ConfigError, match="compare takes two runs"):
        api.report(None, out=tmp_path / "r.html", compare=[store.runs["cascade"]], home=store.home)
