"""Reading the BUILT docs site (``site/``) as a reader sees it, for ``tests/test_docs.py``.

``mkdocs build --strict`` checks links and references, not what the HTML shows: a heading anchor
that no extension reads stays on the page as ``lfcc {#frontend-lfcc}``, a Markdown link inside raw
HTML stays ``[text](link)``. This module reads each page's visible text (outside code, where such
characters are the content) and its images and stylesheets; and, where a Chromium is installed,
renders a few pages in it to see what only layout shows (a name broken mid-word in a table).
"""

from __future__ import annotations

import contextlib
import functools
import html
import http.server
import json
import re
import shutil
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

# what a reader must never see as text: Markdown or template syntax that was not rendered, or a placeholder
LEFT_AS_TEXT = {
    "a heading/attribute list ({#...})": re.compile(r"\{#[\w:-]"),
    "an attribute list ({: ...})": re.compile(r"\{:"),
    "bold markers (**text**)": re.compile(r"(?<![\w*])\*\*(?=\S)[^*\n]+?(?<=\S)\*\*(?![\w*])"),
    "emphasis markers (*text* or _text_)": re.compile(
        r"(?<![\w*\\])\*(?=[^\s*])[^*\n]+?(?<=[^\s*])\*(?![\w*])|(?<![\w_])_(?=[^\s_])[^_\n]+?(?<=[^\s_])_(?![\w_])"
    ),
    "a backtick (a code span left as text)": re.compile(r"`"),
    "a Markdown link ([text](target))": re.compile(r"\[[^\]\n]+\]\((?:[\w./#-]+|https?://\S+)\)"),
    "a Markdown heading (## at a line's start)": re.compile(r"(?m)^#{2,6} \w"),
    "a template tag ({{ }} or {% %})": re.compile(r"\{\{|\}\}|\{%|%\}"),
    "an admonition or mkdocstrings directive (!!! / :::)": re.compile(r"(?m)^\s*(?:!!!|\?\?\?|:::) ?\w"),
    "a placeholder (TODO, FIXME, TBD, lorem ipsum)": re.compile(r"\b(?:TODO|FIXME|TBD|XXX)\b|lorem ipsum", re.I),
}
CODE_TAGS = {"code", "pre", "kbd", "samp", "script", "style", "svg", "textarea"}


@dataclass
class Page:
    """One built HTML page: its visible prose (outside code) and what it loads."""

    path: Path
    text: str = ""
    images: list[str] = field(default_factory=list)
    stylesheets: list[str] = field(default_factory=list)
    table_code: list[str] = field(default_factory=list)  # the text of each code span in a table cell


class _Reader(HTMLParser):
    def __init__(self, page: Page) -> None:
        super().__init__(convert_charrefs=True)
        self.page, self.in_code, self.in_cell, self.chunks = page, 0, 0, []
        self.code: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attr = dict(attrs)
        if tag in CODE_TAGS:
            self.in_code += 1
            if tag == "code" and self.in_cell and self.code is None:
                self.code = []
        elif tag in ("td", "th"):
            self.in_cell += 1
        elif tag == "img" and attr.get("src"):
            self.page.images.append(attr["src"])
        elif tag == "link" and attr.get("rel") == "stylesheet" and attr.get("href"):
            self.page.stylesheets.append(attr["href"])
        if tag in {"p", "li", "h1", "h2", "h3", "h4", "h5", "h6", "td", "th", "div", "br", "dt", "dd"}:
            self.chunks.append("\n")

    def handle_endtag(self, tag: str) -> None:
        if tag in CODE_TAGS and self.in_code:
            self.in_code -= 1
            if tag == "code" and self.code is not None:
                self.page.table_code.append("".join(self.code))
                self.code = None
        elif tag in ("td", "th") and self.in_cell:
            self.in_cell -= 1
            self.chunks.append("\n")
        elif tag in {"p", "li", "dt", "dd"} or tag.startswith("h") and tag[1:].isdigit():
            self.chunks.append("\n")

    def handle_data(self, data: str) -> None:
        self.chunks.append(" " if self.in_code else data)  # code is content, not leftover syntax
        if self.code is not None:
            self.code.append(data)


def read_page(path: Path) -> Page:
    """Parse one built page (standard library's HTML parser: no extra dependency for the test)."""
    page = Page(path)
    reader = _Reader(page)
    reader.feed(path.read_text(encoding="utf-8"))
    reader.close()
    page.text = "".join(reader.chunks)
    return page


def pages(site: Path) -> list[Page]:
    """Every page of the built site (mkdocs writes ``404.html`` and ``<page>/index.html``)."""
    return [read_page(path) for path in sorted(site.rglob("*.html"))]


def leftovers(page: Page) -> list[str]:
    """What the page shows as text that should have been rendered: ``what: the line``, one per find."""
    found = []
    for what, pattern in LEFT_AS_TEXT.items():
        for match in pattern.finditer(page.text):
            start = page.text.rfind("\n", 0, match.start()) + 1
            end = page.text.find("\n", match.end())
            found.append(f"{what}: {page.text[start : end if end >= 0 else None].strip()[:120]!r}")
    # GitHub's tables need `\|` even in code; Python-Markdown's show the backslash (the hook removes it)
    found += [
        f"an escaped pipe shown as \\| in a table's code: {code[:120]!r}" for code in page.table_code if "\\|" in code
    ]
    return found


def missing_files(site: Path, page: Page) -> list[str]:
    """The page's images and stylesheets (relative, or absolute from the site's root) that are not in the site."""
    missing = []
    for ref in [*page.images, *page.stylesheets]:
        parts = urlsplit(ref)
        if parts.scheme in ("data", "http", "https") or parts.netloc:
            continue  # not a file of the site (the site loads nothing from the network: font: false)
        target = (
            site / unquote(parts.path).lstrip("/")
            if parts.path.startswith("/")
            else page.path.parent / unquote(parts.path)
        )
        if not target.is_file() or target.stat().st_size == 0:
            missing.append(ref)
    return missing


# --------------------------------------------------------------------------- in a browser
def browser() -> str | None:
    """A Chromium (Debian's ``chromium``, or Chrome) on PATH, else None."""
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if found := shutil.which(name):
            return found
    return None


CHECK_URL = "_rendered_check.html"  # where the check page is served: beside the site's pages, not written into it


@contextlib.contextmanager
def served(site: Path, check_page: str) -> Iterator[str]:
    """The built site over HTTP on 127.0.0.1 (a free port), with ``check_page`` at ``CHECK_URL``:
    served from one origin, the check page's script can read the pages in its frames (file://
    pages are each their own origin). Yields the base URL."""
    handler = functools.partial(_SiteHandler, check_page.encode(), directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


class _SiteHandler(http.server.SimpleHTTPRequestHandler):
    def __init__(self, check_page: bytes, *args: object, **kwargs: object) -> None:
        self.check_page = check_page
        super().__init__(*args, **kwargs)

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        if self.path.lstrip("/") != CHECK_URL:
            return super().do_GET()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(self.check_page)))
        self.end_headers()
        self.wfile.write(self.check_page)
        return None

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - the base class's name
        pass


FRAME_HEIGHT = 900  # each page is shown in a frame this tall, one under the other


# The check page: each page in a frame of a reader's width, one under the other (so one screenshot
# shows them all); once all have loaded, for each: the code spans without a space in its tables
# that the layout broke over lines (an inline element broken over lines has several boxes, and a
# name has no space to break at), its images that did not load, the anchors its rendered text
# shows literally, and whether the site's stylesheet reached its tables.
CHECK_PAGE = """<!doctype html><html><head><meta charset="utf-8"><title>rendered check</title>
<style>body{margin:0}iframe{border:0;display:block}#result{display:none}</style></head><body>
<pre id="result">pending</pre>
<script>
const PAGES = __PAGES__;
const frames = PAGES.map(([url, width]) => {
  const frame = document.createElement("iframe");
  frame.src = url; frame.width = width; frame.height = __HEIGHT__; document.body.appendChild(frame); return frame;
});
window.addEventListener("load", () => {
  const report = frames.map((frame, i) => {
    const doc = frame.contentDocument;
    const codes = [...doc.querySelectorAll("article table td code")];
    const broken = codes.filter(c => !/\\s/.test(c.textContent) && c.getClientRects().length > 1);
    const images = [...doc.querySelectorAll("article img")];
    return {page: PAGES[i][0], width: PAGES[i][1], title: doc.title, table_codes: codes.length,
            broken: broken.map(c => c.textContent).slice(0, 20), broken_count: broken.length,
            images: images.length, unloaded: images.filter(im => !im.complete || im.naturalWidth === 0).map(im => im.src),
            literal_anchors: (doc.body.innerText.match(/\\{#[\\w-]+\\}/g) || []).slice(0, 20),
            table_code_word_break: codes.length ? getComputedStyle(codes[0]).wordBreak : null};
  });
  document.getElementById("result").textContent = JSON.stringify(report);
});
</script></body></html>
"""


def render(
    chromium: str, site: Path, pages_widths: list[tuple[str, int]], shot: Path, timeout: float = 120
) -> list[dict]:
    """Load each ``(page, width)`` of the built site in headless Chromium, in one browser start that
    also draws them all into the PNG ``shot``; returns what the check page measured, one dict a page."""
    check_page = CHECK_PAGE.replace("__PAGES__", json.dumps(pages_widths)).replace("__HEIGHT__", str(FRAME_HEIGHT))
    size = f"{max(width for _, width in pages_widths)},{FRAME_HEIGHT * len(pages_widths)}"
    profile = shot.parent / "chromium-profile"
    # --no-sandbox: tests may run as root (containers), where Chromium's sandbox refuses to start;
    # the virtual-time budget lets the page's load handler run before the DOM is written out
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
             "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--virtual-time-budget=10000",
             f"--window-size={size}", "--hide-scrollbars", f"--screenshot={shot}", "--dump-dom"]  # fmt: skip
    with served(site, check_page) as base:
        done = subprocess.run([chromium, *flags, base + CHECK_URL], capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip
    match = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.S)
    if not match or match.group(1) == "pending":
        raise RuntimeError(f"Chromium gave no result (exit {done.returncode}): {done.stderr[-1500:]}")
    return json.loads(html.unescape(match.group(1)))
