"""Local Sphinx extension for the book's HTML: offline MathJax, and a clean browser console.

1. **MathJax from the build, not a CDN** (the book renders with no network).

The MathJax 3.2.2 distribution comes from the PyPI package ``sphinx-mathjax-offline``
(pinned in requirements.txt).  Its module directory is named ``sphinx-mathjax-offline``
(with hyphens), so it is located with :func:`importlib.util.find_spec`; it is only used
as a data source here.  After a successful HTML build, the CommonHTML bundle
``tex-chtml.js`` and the lazily loaded pieces it may request (TeX extensions for
``\\require``/autoload, the CHTML woff fonts, the menu, a11y and speech-rule files) are
copied to ``_build/html/_static/mathjax/``.  ``_config.yml`` sets
``mathjax_path: mathjax/tex-chtml.js``, which Sphinx resolves relative to ``_static``;
a remote ``mathjax_path`` is refused.

2. **No duplicate inline scripts.**  ``sphinx-thebe`` 0.3.1 registers its inline
``const THEBE_JS_URL = ...`` script on ``env-before-read-docs``, which Jupyter Book's
build emits twice, so every page declared the constant twice: "Uncaught SyntaxError:
Identifier 'THEBE_JS_URL' has already been declared" in every reader's console.  Identical
script entries are dropped per page.  (thebe itself is never loaded: launch_buttons has no
``thebe``.)

3. **A valid colour mode.**  pydata-sphinx-theme logs "Got invalid theme mode: ." as a
console error on a first visit unless ``html_context["default_mode"]`` is set; it is set
to ``auto`` (what the theme falls back to anyway) unless _config.yml sets it.

4. **A favicon at the root.**  Jupyter Book's root ``index.html`` is a bare redirect with no
icon link; a browser may ask for ``/favicon.ico`` before it follows it, a 404 in the console.
:func:`root_favicon` writes ``favicon.ico`` (the book's icon) to the site's root.

tests/test_book_browser.py checks all four in headless Chromium.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

DIST_MODULE = "sphinx-mathjax-offline"
#: Files and directories (relative to the distribution's ``static/mathjax``) copied to
#: ``_static/mathjax``: the combined component and everything it can load at run time.
#: The other combined bundles (SVG output, full/speech variants, node-main) are left out.
ASSETS = (
    "tex-chtml.js",
    "a11y",
    "adaptors",
    "input",
    "output/chtml.js",
    "output/chtml",
    "sre",
    "ui",
)


def mathjax_source() -> Path:
    spec = importlib.util.find_spec(DIST_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise ExtensionError(
            f"{DIST_MODULE} is not installed (pip install -r requirements.txt); "
            "it provides the MathJax files the book serves locally"
        )
    src = Path(next(iter(spec.submodule_search_locations))) / "static" / "mathjax"
    if not (src / "tex-chtml.js").is_file():
        raise ExtensionError(f"no MathJax tex-chtml.js under {src}")
    return src


def check_config(app: Sphinx, config) -> None:
    path = config.mathjax_path or ""
    if "://" in path or path.startswith("//"):
        raise ExtensionError(
            f"mathjax_path is {path!r}: the book must serve MathJax locally "
            "(set sphinx.config.mathjax_path: mathjax/tex-chtml.js in _config.yml)"
        )


def copy_mathjax(app: Sphinx, exc: Exception | None) -> None:
    if exc is not None or app.builder.format != "html":
        return
    src = mathjax_source()
    dest = Path(app.outdir) / "_static" / "mathjax"
    for rel in ASSETS:
        s, d = src / rel, dest / rel
        d.parent.mkdir(parents=True, exist_ok=True)
        if s.is_dir():
            shutil.copytree(s, d, dirs_exist_ok=True)
        else:
            shutil.copy2(s, d)


def root_favicon(app: Sphinx, exc: Exception | None) -> None:
    """``favicon.ico`` at the site's root: Jupyter Book's root ``index.html`` is a bare redirect
    with no icon link, and a browser that asks for ``/favicon.ico`` before it follows the
    redirect logs a 404 (a console error, sometimes: it races the redirect). The icon is
    ``book/_static/favicon.svg`` drawn again with Pillow (a dependency of matplotlib): the
    same rounded square and three bars, 32 x 32."""
    if exc is not None or app.builder.format != "html":
        return
    from PIL import Image, ImageDraw  # only at build time

    img = Image.new("RGBA", (32, 32), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    draw.rounded_rectangle((0, 0, 31, 31), radius=6, fill="#1f4e79")
    for x, y in ((6, 18), (13.5, 11), (21, 6)):  # the svg's bars: width 5, down to y = 26
        draw.rectangle((round(x), y, round(x) + 4, 25), fill="#ffffff")
    img.save(Path(app.outdir) / "favicon.ico", sizes=[(32, 32)])


def dedupe_scripts(app: Sphinx, pagename, templatename, context, doctree) -> None:
    scripts = context.get("script_files")
    if not scripts:
        return
    seen, unique = set(), []
    for js in scripts:
        # The first registration has filename None, the one from the second event '' (the
        # inline-script marker after Sphinx's own round trip): compare them as equal.
        filename = str(getattr(js, "filename", js) or "")
        attrs = getattr(js, "attributes", {}) or {}
        key = (filename, tuple(sorted((k, str(v)) for k, v in attrs.items())))
        if key not in seen:
            seen.add(key)
            unique.append(js)
    scripts[:] = unique


def default_colour_mode(app: Sphinx, config) -> None:
    # pydata-sphinx-theme reads it from the template context (html_context), not theme options.
    context = dict(config.html_context or {})
    context.setdefault("default_mode", "auto")
    config.html_context = context


def setup(app: Sphinx) -> dict:
    app.connect("config-inited", check_config)
    app.connect("config-inited", default_colour_mode)
    app.connect("html-page-context", dedupe_scripts)
    app.connect("build-finished", copy_mathjax)
    app.connect("build-finished", root_favicon)
    # Fail early, at set-up, if the files are missing.
    mathjax_source()
    return {"version": "1.0", "parallel_read_safe": True, "parallel_write_safe": True}
