"""Screenshots of report sections for docs/reports.md, taken on purpose (`make docs-screenshots`), never by tests.

Builds `mai report` over the store at --home (every completed run), opens it in Debian's headless chromium through
playwright (nothing is downloaded), waits until every chart has drawn, and saves one PNG per section id
(`figure-4`, `table-7`, ...) under --out. The store is any store: the shapes pair's (`mai run` with
`shapes_pair_config`), or one holding two pairs, an S2 run and a sweep, like tests/test_report_groups.py builds.

    python scripts/report_screenshots.py --home STORE [--out docs/report] [--sections figure-4 table-7 ...]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path(os.environ.get("MAI_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
SECTIONS = ["figure-4", "figure-5", "table-7", "table-9", "table-11", "table-12", "table-16"]


def screenshots(home: Path, out: Path, sections: list[str]) -> list[Path]:
    from mai.flows import api
    from playwright.sync_api import sync_playwright

    if not CHROMIUM.is_file():
        raise SystemExit(f"{CHROMIUM} is missing: `make chromium` installs Debian's chromium (or set MAI_CHROMIUM)")
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory() as temp:
        report = Path(temp) / "report.html"
        api.report(None, out=report, home=home)
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto(report.as_uri())
            page.wait_for_function(
                "[...document.querySelectorAll('.chart')].every(c => c.dataset.drawn !== undefined)", timeout=60_000)
            page.mouse.move(0, 0)
            for key in sections:
                path = out / f"{key}.png"
                page.locator(f"#{key}").screenshot(path=str(path))
                written.append(path)
            browser.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True, help="the mai store to report on")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "report")
    parser.add_argument("--sections", nargs="+", default=SECTIONS)
    args = parser.parse_args()
    for path in screenshots(args.home, args.out, args.sections):
        print(path)


if __name__ == "__main__":
    main()
