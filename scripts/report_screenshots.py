"""Screenshots of report sections for docs/reports.md, taken on purpose (`make docs-screenshots`), never by tests.

Builds `mai report` over the store at --home (every completed run), opens it in Debian's headless chromium through
playwright (nothing is downloaded), waits until every chart has drawn, and saves one PNG per section id
(`figure-4`, `table-7`, ...) under --out, in 256 colours to keep the repository small. A section is never cut: a
table wider than the page scrolls inside its frame in the report, so for the picture the section is widened to its
widest table and the frames let it show (`WIDEN`), and the PNG is checked to hold the whole section. The store is any store:
the shapes pair's (`mai run` with `shapes_pair_config`), or one holding two pairs, an S2 run and a sweep, like
tests/test_report_groups.py builds (docs/reports.md says how the docs' store was made).

    python scripts/report_screenshots.py --home STORE [--out docs/report] [--sections figure-4 table-7 ...]
    python scripts/report_screenshots.py --shrink docs/report/*.png
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
# the section at the width of its widest content (a wide table scrolls inside `.table-wrap` in the report, and an
# element's picture holds only its box): its width and left edge in CSS pixels
WIDEN = """key => {
  document.body.style.marginLeft = document.body.getBoundingClientRect().left + 'px';  // a wider viewport moves nothing
  const section = document.getElementById(key);
  // charts keep their width (a chart is as wide as its section, and a wider window redraws it)
  section.querySelectorAll('.chart').forEach(c => { c.style.width = c.getBoundingClientRect().width + 'px'; });
  const frames = [...section.querySelectorAll('.table-wrap')];
  const width = Math.ceil(Math.max(section.scrollWidth, ...frames.map(f => f.scrollWidth)));
  frames.forEach(f => { f.style.overflow = 'visible'; });
  section.style.width = width + 'px';
  section.style.maxWidth = 'none';
  return [width, Math.ceil(section.getBoundingClientRect().left)];
}"""


def screenshots(home: Path, out: Path, sections: list[str]) -> list[Path]:
    from playwright.sync_api import sync_playwright

    from mai import api

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
                width, left = page.evaluate(WIDEN, key)
                page.set_viewport_size({"width": max(1280, left + width + 16), "height": 900})
                page.wait_for_timeout(300)  # a resized window redraws what listens to it
                section = page.locator(f"#{key}")
                box = section.bounding_box()
                assert box is not None, key
                section.screenshot(path=str(path))
                check_whole(path, int(box["width"]), int(box["height"]))
                shrink(path)
                written.append(path)
            browser.close()
    return written


def check_whole(path: Path, width: int, height: int) -> None:
    """The picture holds the whole section (a pixel of rounding aside), or the script stops: a cut table in the
    docs would show less than it claims."""
    from PIL import Image

    with Image.open(path) as image:
        if image.width < width - 1 or image.height < height - 1:
            raise SystemExit(f"{path.name}: {image.width}x{image.height} px, the section is {width}x{height}")


def shrink(path: Path) -> None:
    """The PNG in 256 colours without dithering (a third of its size: charts and tables hold few colours)."""
    from PIL import Image

    with Image.open(path) as image:
        small = image.convert("RGB").quantize(colors=256, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    small.save(path, optimize=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, help="the mai store to report on")
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "report")
    parser.add_argument("--sections", nargs="+", default=SECTIONS)
    parser.add_argument("--shrink", nargs="+", type=Path, default=[], metavar="PNG",
                        help="only re-save these PNGs in 256 colours (the report tests' screenshots)")
    args = parser.parse_args()
    if args.shrink:
        for path in args.shrink:
            shrink(path)
        return
    if args.home is None:
        parser.error("--home STORE is required (or --shrink PNG ...)")
    for path in screenshots(args.home, args.out, args.sections):
        print(path)


if __name__ == "__main__":
    main()
