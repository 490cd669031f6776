"""Open every page of the built book in headless Chromium, offline, and check what a reader sees.

For each page of ``_toc.yml`` (plus the root ``index.html`` redirect, the search page and the
index), served from ``_build/html`` on 127.0.0.1:

* no console errors (Chrome log entries of level SEVERE);
* every request the page makes goes to the local server (no CDN, no web font, no tracker):
  the browser's network log is checked, and any other host is unresolvable anyway;
* every equation is typeset: each ``.math`` element holds an ``mjx-container``, no MathJax
  error node is present and no raw ``$$``/``\\(``/``\\[``/``\\begin{`` is left in the
  visible prose (code blocks excepted);
* every ``<img>`` is loaded (``naturalWidth > 0``);
* every link into the book resolves to a file in ``_build/html`` (and its ``#fragment`` to an
  ``id`` on that page);
* notebook pages carry a Binder launch button pointing at this repository and notebook;
* what a reader sees, at a window width of 1280 px and again at 1024 px: no Markdown table
  left unrendered (a paragraph starting with ``|`` or any prose containing ``|:-``/``|--``),
  no page-level horizontal overflow (the document is no wider than the window), every
  printed output or error message that scrolls sideways inside its box, every
  ``<img>`` with alt text that is neither empty nor a file hash, every image of the page's
  content inside a ``<figure>`` with a non-empty caption, no MathJax error and no raw ``$``
  or ``\\(`` in the visible prose (code blocks excepted).

One full-page screenshot per page and width goes to ``_build/screenshots/`` (1280 px) and
``_build/screenshots/1024/``.

The HTML is taken from ``_build/html``; it is built with ``make book`` first when missing or
older than a source (``make test`` builds the book just before running this file).  The test
is skipped only when no Chromium/chromedriver is installed (``.ci/run`` installs Debian's
``chromium`` and ``chromium-driver``).
"""

from __future__ import annotations

import base64
import functools
import html.parser
import http.server
import io
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
HTML = ROOT / "_build" / "html"
SHOTS = ROOT / "_build" / "screenshots"


def _find(env: str, *names: str) -> str | None:
    if os.environ.get(env):
        return os.environ[env]
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


CHROMIUM = _find("CHROMIUM", "chromium", "chromium-browser", "google-chrome")
CHROMEDRIVER = _find("CHROMEDRIVER", "chromedriver")

if CHROMIUM is None or CHROMEDRIVER is None:
    pytest.skip(
        "no headless browser installed (need chromium and chromedriver on PATH, or CHROMIUM / "
        "CHROMEDRIVER set; Debian: apt-get install chromium chromium-driver, as .ci/run does)",
        allow_module_level=True,
    )

from selenium import webdriver  # noqa: E402  (after the skip: only needed with a browser)
from selenium.webdriver.chrome.service import Service  # noqa: E402

# --------------------------------------------------------------------------- the book's pages


def _toc_files(node) -> list[str]:
    """Every ``file:`` entry of a (Jupyter Book 1.x, jb-book) _toc.yml, in reading order."""
    out: list[str] = []
    if isinstance(node, dict):
        if "root" in node:
            out.append(node["root"])
        if "file" in node:
            out.append(node["file"])
        for key in ("parts", "chapters", "sections"):
            for child in node.get(key, []) or []:
                out.extend(_toc_files(child))
    elif isinstance(node, list):
        for child in node:
            out.extend(_toc_files(child))
    return out


def _strip_suffix(name: str) -> str:
    return re.sub(r"\.(md|ipynb|rst)$", "", name)


TOC_FILES = [_strip_suffix(f) for f in _toc_files(yaml.safe_load((ROOT / "_toc.yml").read_text()))]
CONFIG = yaml.safe_load((ROOT / "_config.yml").read_text())
NOTEBOOKS = {f for f in TOC_FILES if (ROOT / f"{f}.ipynb").is_file()}
# Pages Sphinx adds besides the chapters: the root redirect, the search page and the index.
EXTRA_PAGES = ["index", "search", "genindex"]
PAGES = TOC_FILES + EXTRA_PAGES


def _sources() -> list[Path]:
    files = [ROOT / "_config.yml", ROOT / "_toc.yml", *sorted((ROOT / "_ext").glob("*.py"))]
    files += [p for p in (ROOT / "book").rglob("*") if p.is_file() and ".ipynb_checkpoints" not in p.parts]
    return files


@pytest.fixture(scope="session")
def built_html() -> Path:
    """``_build/html``, (re)built with ``make book`` when missing or older than a source."""
    index = HTML / "index.html"
    stale = not index.is_file() or any(p.stat().st_mtime > index.stat().st_mtime for p in _sources())
    if stale:
        proc = subprocess.run(["make", "book"], cwd=ROOT, capture_output=True, text=True)
        assert proc.returncode == 0, f"make book failed:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}"
    assert index.is_file()
    return HTML


# --------------------------------------------------------------------------- local server


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature from the base class
        pass


@pytest.fixture(scope="session")
def server(built_html):
    handler = functools.partial(_QuietHandler, directory=str(built_html))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


# --------------------------------------------------------------------------- browser

CHROME_FLAGS = [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
    "--disable-extensions",
    "--window-size=1280,900",
    "--hide-scrollbars",
    # Offline by construction: any host but the local server fails to resolve, so a page
    # that needs the internet shows it here (as a console error and in the network log).
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]


@pytest.fixture(scope="session")
def driver():
    profile = tempfile.mkdtemp(prefix="attnlearn-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in CHROME_FLAGS:
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    drv = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    drv.set_page_load_timeout(60)
    drv.set_script_timeout(60)
    yield drv
    drv.quit()
    shutil.rmtree(profile, ignore_errors=True)


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    shutil.rmtree(SHOTS, ignore_errors=True)
    SHOTS.mkdir(parents=True)
    return SHOTS


# Wait until the page is fully settled: MathJax has typeset (if it is on the page), web fonts
# are loaded and every image (made eager, so below-the-fold ones load too) has finished.
SETTLE_JS = """
const done = arguments[arguments.length - 1];
(async () => {
  const out = {};
  try {
    // under load the MathJax script may still be loading: wait for it (up to 30 s)
    const t1 = Date.now();
    const wanted = () => document.querySelector('.math, script[src*="mathjax"]');
    while (wanted() && !(window.MathJax && MathJax.startup && MathJax.startup.promise)
           && Date.now() - t1 < 30000) {
      await new Promise(r => setTimeout(r, 100));
    }
    if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
      await MathJax.startup.promise;
      out.mathjax = 'typeset';
    } else {
      out.mathjax = window.MathJax ? 'config only (tex-chtml.js not loaded)' : 'absent';
    }
  } catch (e) { out.mathjax = 'error: ' + e; }
  const imgs = Array.from(document.images);
  imgs.forEach(i => { i.loading = 'eager'; });
  await Promise.all(imgs.map(i => (i.complete ? null : i.decode().catch(() => null))));
  const t0 = Date.now();
  while (imgs.some(i => !i.complete) && Date.now() - t0 < 20000) {
    await new Promise(r => setTimeout(r, 100));
  }
  await document.fonts.ready;
  done(out);
})();
"""

INSPECT_JS = """
const math = Array.from(document.querySelectorAll('.math'));
const body = document.body.cloneNode(true);
body.querySelectorAll('pre, code, script, style, mjx-container, .highlight, .MathJax_Preview')
    .forEach(e => e.remove());
return {
  title: document.title,
  mathElements: math.length,
  untypeset: math.filter(e => !e.querySelector('mjx-container'))
                 .map(e => e.textContent.slice(0, 120)),
  containers: document.querySelectorAll('mjx-container').length,
  mathErrors: Array.from(document.querySelectorAll('mjx-merror'))
                 .map(e => e.textContent.slice(0, 120)),
  text: body.innerText,
  images: Array.from(document.images).map(i => ({
      src: i.currentSrc || i.src, complete: i.complete, naturalWidth: i.naturalWidth})),
  links: Array.from(document.querySelectorAll('a[href]')).map(a => a.href),
  height: Math.max(document.body.scrollHeight, document.documentElement.scrollHeight),
};
"""

# What a reader sees, measured at the current window width (item by item in _reader_problems).
READER_JS = """
const view = document.documentElement.clientWidth;
const doc = Math.max(document.documentElement.scrollWidth, document.body.scrollWidth);
const inCode = e => e.closest('pre, code, .highlight, script, style, mjx-container');
const tableText = Array.from(document.querySelectorAll('p')).filter(e => !inCode(e))
    .map(e => e.innerText.trim())
    .filter(t => t.startsWith('|') || /\\|\\s*:?-+:?\\s*\\|/.test(t));
const content = document.querySelector('article') || document.querySelector('main') || document.body;
const imgs = Array.from(content.querySelectorAll('img'));
const wide = Array.from(document.querySelectorAll('article *'))
    .filter(e => !e.closest('pre, .highlight, .MathJax, mjx-container, .table-wrapper'))
    .filter(e => e.getBoundingClientRect().right > view + 1)
    .map(e => e.tagName.toLowerCase() + (e.className ? '.' + String(e.className).split(' ')[0] : ''))
    .slice(0, 5);
// printed outputs and error messages (not code inputs) must wrap, not scroll sideways
const scrolling = Array.from(document.querySelectorAll('div.cell_output pre, div.output pre'))
    .filter(e => e.scrollWidth > e.clientWidth + 1)
    .map(e => e.innerText.split('\\n').sort((a, b) => b.length - a.length)[0].slice(0, 60));
return {
  view: view,
  doc: doc,
  scrolling: scrolling,
  wide: wide,
  tables: tableText.map(t => t.slice(0, 80)),
  imgs: Array.from(document.images).map(i => ({src: (i.getAttribute('src') || '').slice(-60),
                                              alt: i.getAttribute('alt')})),
  uncaptioned: imgs.filter(i => {
      const f = i.closest('figure');
      const c = f && f.querySelector('figcaption');
      return !(c && c.innerText.trim());
  }).map(i => (i.getAttribute('src') || '').slice(-60)),
};
"""

# An alt text that is a file name or a hash (myst-nb's default is the image's file name).
HASH_ALT = re.compile(r"^(?:[0-9a-f]{8,}|.*\.(?:png|svg|jpe?g|gif))$", re.IGNORECASE)
# Raw TeX in the prose: display/inline delimiters, a lone dollar, \begin{...}.
RAW_DOLLAR = re.compile(r"\$")


def _reader_problems(drv, info, width: int) -> list[str]:
    """Item 7's checks at one window width (the window is already that wide)."""
    r = drv.execute_script(READER_JS)
    out = []
    if r["tables"]:
        out.append(f"[{width}px] {len(r['tables'])} unrendered Markdown table(s), e.g. {r['tables'][:2]}")
    if r["doc"] > r["view"] + 1:
        out.append(
            f"[{width}px] page-level horizontal overflow: document {r['doc']} px wide in a "
            f"{r['view']} px window; wide elements e.g. {r['wide']}"
        )
    if r["scrolling"]:
        out.append(f"[{width}px] {len(r['scrolling'])} output block(s) scrolling sideways, e.g. {r['scrolling'][:2]}")
    bad_alt = [i["src"] for i in r["imgs"] if not (i["alt"] or "").strip() or HASH_ALT.match(i["alt"].strip())]
    if bad_alt:
        out.append(f"[{width}px] {len(bad_alt)} <img> without real alt text, e.g. {bad_alt[:3]}")
    if r["uncaptioned"]:
        out.append(f"[{width}px] {len(r['uncaptioned'])} image(s) without a figure caption, e.g. {r['uncaptioned'][:3]}")
    return out


RAW_TEX = re.compile(r"\$\$|\\\(|\\\)|\\\[|\\\]|\\begin\{")


class _Ids(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for key, value in attrs:
            if key in ("id", "name") and value:
                self.ids.add(value)


@functools.lru_cache(maxsize=None)
def _ids(path: Path) -> frozenset[str]:
    parser = _Ids()
    parser.feed(path.read_text(encoding="utf-8", errors="replace"))
    return frozenset(parser.ids)


def _local_target(root: Path, url_path: str) -> Path:
    path = root / unquote(url_path).lstrip("/")
    if url_path.endswith("/") or path.is_dir():
        path = path / "index.html"
    return path


def _requests(drv) -> list[str]:
    urls = []
    for entry in drv.get_log("performance"):
        msg = json.loads(entry["message"])["message"]
        if msg.get("method") == "Network.requestWillBeSent":
            urls.append(msg["params"]["request"]["url"])
    return urls


def _screenshot(drv, path: Path, height: int, width: int = 1280) -> None:
    height = max(900, min(int(height), 30000))
    shot = drv.execute_cdp_cmd(
        "Page.captureScreenshot",
        {
            "format": "png",
            "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": width, "height": height, "scale": 1},
        },
    )
    path.write_bytes(base64.b64decode(shot["data"]))


def _repository() -> tuple[str, str]:
    """(owner/name, branch) of this repository as _config.yml states it."""
    repo = CONFIG["repository"]
    m = re.fullmatch(r"https://github\.com/([^/]+/[^/]+?)/?", repo["url"])
    assert m, f"unexpected repository.url {repo['url']!r}"
    return m.group(1), repo.get("branch", "main")


# --------------------------------------------------------------------------- tests


def test_every_toc_page_is_built_and_nothing_else(built_html):
    built = {
        p.relative_to(built_html).with_suffix("").as_posix()
        for p in built_html.rglob("*.html")
        if not p.relative_to(built_html).parts[0].startswith("_")
    }
    assert built == set(PAGES), "built HTML pages differ from _toc.yml (+ index/search/genindex)"


def test_root_serves_the_favicon(built_html, server):
    """The root redirect page has no icon link, so a browser asks for /favicon.ico: it is
    served (an ICO of the book's icon, written by _ext/book_html.py), not a 404."""
    import urllib.request

    from PIL import Image

    assert "Refresh" in (built_html / "index.html").read_text()  # the bare redirect
    with urllib.request.urlopen(f"{server}/favicon.ico") as resp:
        assert resp.status == 200
        icon = Image.open(io.BytesIO(resp.read()))
    assert icon.format == "ICO" and icon.size == (32, 32)
    assert icon.convert("RGB").getpixel((16, 2)) == (0x1F, 0x4E, 0x79)  # the square's blue


@pytest.mark.parametrize("page", PAGES)
def test_page_renders_offline(page, server, driver, built_html, screenshot_dir):
    url = f"{server}/{page}.html"
    driver.get_log("browser")  # drop entries from earlier pages
    driver.get_log("performance")
    t0 = time.monotonic()
    driver.get(url)
    if page == "index":
        # The root page is a redirect (meta refresh) to the book's root chapter: let it land.
        root_url = f"{server}/{TOC_FILES[0]}.html"
        deadline = time.monotonic() + 15
        while driver.current_url != root_url and time.monotonic() < deadline:
            time.sleep(0.1)
        driver.execute_script("return document.readyState")  # wait for the new document
        while driver.execute_script("return document.readyState") != "complete" and time.monotonic() < deadline:
            time.sleep(0.1)
    settled = driver.execute_async_script(SETTLE_JS)
    info = driver.execute_script(INSPECT_JS)
    if info["mathElements"] and settled["mathjax"] != "typeset":
        # under load the settle script can run before the page's maths and MathJax script are
        # in the document (seen once on a 2-core CI machine); settle again, then judge
        settled = driver.execute_async_script(SETTLE_JS)
        info = driver.execute_script(INSPECT_JS)
    console = driver.get_log("browser")
    requests = _requests(driver)
    _screenshot(driver, screenshot_dir / (page.replace("/", "__") + ".png"), info["height"])
    problems: list[str] = []

    if page == "index" and driver.current_url != f"{server}/{TOC_FILES[0]}.html":
        problems.append(f"index.html did not redirect to {TOC_FILES[0]}.html: {driver.current_url}")

    # 1. no console errors
    severe = [e["message"] for e in console if e["level"] == "SEVERE"]
    if severe:
        problems.append("console errors:\n  " + "\n  ".join(severe))

    # 2. everything loaded from the local server
    # (chrome://, data:, blob: are the browser's own, not network requests)
    remote = sorted(
        {u for u in requests if urlsplit(u).scheme in ("http", "https", "ws", "wss") and not u.startswith(server + "/")}
    )
    if remote:
        problems.append("requests leaving the local server:\n  " + "\n  ".join(remote))

    # 3. mathematics typeset
    if info["mathElements"]:
        if settled["mathjax"] != "typeset":
            problems.append(f"MathJax did not run: {settled['mathjax']}")
        if info["untypeset"]:
            problems.append(f"{len(info['untypeset'])} math elements not typeset, e.g. {info['untypeset'][:3]}")
        if info["containers"] < info["mathElements"]:
            problems.append(f"{info['containers']} mjx-container for {info['mathElements']} math elements")
    if info["mathErrors"]:
        problems.append(f"MathJax errors: {info['mathErrors'][:5]}")
    dollars = len(RAW_DOLLAR.findall(info["text"]))
    if dollars:
        at = [info["text"][max(0, m.start() - 40) : m.end() + 40] for m in RAW_DOLLAR.finditer(info["text"])]
        problems.append(f"{dollars} raw $ in the visible text, e.g. {at[:3]}")
    raw = sorted({m.group(0) for m in RAW_TEX.finditer(info["text"])})
    if raw:
        snippets = [info["text"][max(0, m.start() - 40) : m.end() + 40] for m in RAW_TEX.finditer(info["text"])]
        problems.append(f"raw TeX {raw} in the visible text, e.g. {snippets[:3]}")

    # 4. images
    broken = [i["src"] for i in info["images"] if not (i["complete"] and i["naturalWidth"] > 0)]
    if broken:
        problems.append(f"images not loaded: {broken}")

    # 5. internal links
    for href in info["links"]:
        parts = urlsplit(href)
        if f"{parts.scheme}://{parts.netloc}" != server:
            continue
        target = _local_target(built_html, parts.path)
        if not target.is_file():
            problems.append(f"broken link {href} (no {target.relative_to(built_html)})")
        elif parts.fragment and target.suffix == ".html" and unquote(parts.fragment) not in _ids(target):
            problems.append(f"broken anchor {href}")

    # 6. Binder launch button on notebook pages
    if page in NOTEBOOKS:
        repo, branch = _repository()
        binder = [h for h in info["links"] if h.startswith("https://mybinder.org/")]
        expected = f"https://mybinder.org/v2/gh/{repo}/{branch}?"
        if not binder:
            problems.append("no Binder launch button on a notebook page")
        for h in binder:
            if not h.startswith(expected) or f"urlpath=tree/{page}.ipynb" not in unquote(h):
                problems.append(f"Binder link {h} does not open {page}.ipynb via {expected}")

    # 7. what a reader sees, at 1280 px and at 1024 px
    problems.extend(_reader_problems(driver, info, 1280))
    driver.set_window_size(1024, 900)
    try:
        time.sleep(0.3)  # let the layout settle at the new width
        problems.extend(_reader_problems(driver, info, 1024))
        narrow = screenshot_dir / "1024"
        narrow.mkdir(exist_ok=True)
        height = driver.execute_script("return document.documentElement.scrollHeight")
        _screenshot(driver, narrow / (page.replace("/", "__") + ".png"), height, width=1024)
    finally:
        driver.set_window_size(1280, 900)

    elapsed = time.monotonic() - t0
    assert not problems, f"{url} ({info['title']!r}, {elapsed:.1f}s):\n" + "\n".join(problems)
