"""Open a page in headless Chromium and report, from inside the browser, which images loaded,
what sticks out of the page and which labels overlap.

The page is copied with a probe script appended; Chromium loads it from a file URL, runs
the probe after the load event, and prints the DOM (``--dump-dom``), from which the probe's
result is read. Only a real browser decoding the images can give a non-zero natural width.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

PROBE = """<script>window.addEventListener('load', () => {
  const images = [...document.images].map(i => ({alt: i.alt, loaded: i.complete && i.naturalWidth > 0,
                                                width: i.naturalWidth, height: i.naturalHeight}));
  // what sticks out of the page: elements past the viewport's right edge, except inside a box
  // that scrolls sideways (a wide table's), and whether the page itself scrolls sideways
  const width = document.documentElement.clientWidth;
  const scrolls = e => e.closest('.table-scroll') !== null && !e.classList.contains('table-scroll');
  const overflowing = [...document.body.querySelectorAll('*')]
    .filter(e => e.id !== 'spartan-probe' && !scrolls(e) && e.getBoundingClientRect().right > width + 1)
    .map(e => e.tagName + ': ' + (e.textContent || e.alt || '').slice(0, 60));
  // labels drawn over each other: any two text boxes (headings, paragraphs, cells, images) that intersect
  const boxes = [...document.body.querySelectorAll('h1, h2, p, th, td, img')]
    .map(e => ({name: e.tagName + ': ' + (e.textContent || e.alt || '').slice(0, 40), r: e.getBoundingClientRect()}))
    .filter(b => b.r.width > 0 && b.r.height > 0).sort((a, b) => a.r.top - b.r.top);
  const overlapping = [];
  for (let i = 0; i < boxes.length; i++) {
    for (let j = i + 1; j < boxes.length && boxes[j].r.top < boxes[i].r.bottom - 1; j++) {
      const a = boxes[i].r, b = boxes[j].r;
      if (Math.min(a.right, b.right) - Math.max(a.left, b.left) > 1 &&
          Math.min(a.bottom, b.bottom) - Math.max(a.top, b.top) > 1) overlapping.push([boxes[i].name, boxes[j].name]);
    }
  }
  const out = document.createElement('pre'); out.id = 'spartan-probe';
  out.textContent = JSON.stringify({title: document.title, images: images,
                                    tables: document.querySelectorAll('table').length,
                                    page_scrolls_sideways: document.documentElement.scrollWidth > width,
                                    overflowing: overflowing, overlapping: overlapping.slice(0, 20)});
  document.body.appendChild(out);
});</script>"""
# The flags a root process needs in a closed sandbox (no GPU, no network, no first-run UI).
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium() -> str | None:
    """The Chromium executable on PATH, or None."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def inspect_page(page: Path, scratch: Path, *, screenshot: Path | None = None) -> dict:
    """``{'title', 'images': [{'alt', 'loaded', 'width', 'height'}], 'tables', 'page_scrolls_sideways',
    'overflowing', 'overlapping'}`` as the browser saw ``page`` (in a 1200 px wide window)."""
    browser = chromium()
    if browser is None:
        raise RuntimeError("no Chromium on PATH")
    page, scratch = Path(page).resolve(), Path(scratch).resolve()  # file URIs need absolute paths
    scratch.mkdir(parents=True, exist_ok=True)
    probed = scratch / f"probed-{page.name}"
    text = page.read_text()
    probed.write_text(text.replace("</body>", PROBE + "</body>") if "</body>" in text else text + PROBE)
    common = [browser, *FLAGS, f"--user-data-dir={scratch / 'profile'}", "--virtual-time-budget=10000"]
    run = subprocess.run(
        [*common, "--window-size=1200,3000", "--dump-dom", probed.as_uri()], capture_output=True, text=True, timeout=120
    )
    found = re.search(r'<pre id="spartan-probe">(.*?)</pre>', run.stdout, re.S)
    if found is None:
        raise RuntimeError(f"the probe did not run (exit {run.returncode}): {run.stderr[-2000:]}")
    if screenshot is not None:
        subprocess.run(
            [*common, f"--screenshot={screenshot}", "--window-size=1200,3000", page.as_uri()],
            capture_output=True,
            timeout=120,
        )
    import html

    return json.loads(html.unescape(found.group(1)))
