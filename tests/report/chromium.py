"""Render a page in headless Chromium: DOM after load (with a checker script) and a screenshot."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

#: flags for Chromium as root, in a container, without a GPU
HEADLESS = ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--hide-scrollbars", "--allow-file-access-from-files")
#: virtual time Chromium waits for the page (and its images) to load, ms
LOAD_BUDGET_MS = 5000
#: seconds a Chromium call may take
TIMEOUT_S = 120

#: sets data-images on <body>: "loaded/total", counting images with naturalWidth > 0
CHECKER = """<script>
window.addEventListener("load", () => {
  const imgs = [...document.images];
  const ok = imgs.filter(i => i.complete && i.naturalWidth > 0).length;
  document.body.dataset.images = ok + "/" + imgs.length;
});
</script>"""


def loaded_dom(chromium: str, page: Path) -> str:
    """The page's DOM after load, with CHECKER's verdict on <body> (a copy of the page is
    rendered, next to it, so relative paths behave as in the original)."""
    probe = page.with_name("_probe_" + page.name)
    probe.write_text(page.read_text().replace("</body>", CHECKER + "</body>"))
    try:
        out = subprocess.run([chromium, *HEADLESS, f"--virtual-time-budget={LOAD_BUDGET_MS}",
                              "--dump-dom", probe.as_uri()], capture_output=True, text=True,
                             timeout=TIMEOUT_S, check=True)
    finally:
        probe.unlink()
    return out.stdout


def images_loaded(dom: str) -> tuple[int, int]:
    """(loaded, total) from CHECKER's attribute in a dumped DOM."""
    m = re.search(r'data-images="(\d+)/(\d+)"', dom)
    if m is None:
        raise AssertionError("the checker script did not run (no data-images on <body>)")
    return int(m.group(1)), int(m.group(2))


def screenshot(chromium: str, page: Path, out: Path, width: int, height: int) -> Path:
    subprocess.run([chromium, *HEADLESS, f"--virtual-time-budget={LOAD_BUDGET_MS}",
                    f"--window-size={width},{height}", f"--screenshot={out}", page.as_uri()],
                   capture_output=True, timeout=TIMEOUT_S, check=True)
    return out
