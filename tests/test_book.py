"""The built book, opened in headless Chromium: pages render, math is typeset by the vendored MathJax,
figures load, downloads are offered, and the console stays clean. Everything is served on loopback."""
from __future__ import annotations

import functools
import fcntl
import hashlib
import html
import html.parser
import json
import os
import re
import http.server
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.services
import yaml

from autograder import book_editions, kit, kit_texts
from autograder.course import Course

from .browser import Browser

ROOT = Path(__file__).resolve().parent.parent
COURSE = Course()
TOC = yaml.safe_load((ROOT / "_toc.yml").read_text())
PAGES = [entry["file"] for part in TOC["parts"] for entry in part["chapters"]]
MATH_DONE = ("(window.MathJax && MathJax.startup && MathJax.startup.promise ? "
             "MathJax.startup.promise.then(() => true) : false)")


# What the built book is made of: a build is reused only while none of these has changed. The site also offers the
# learner kit (autograder/book_site.py), built from the learner package and the course's pins. The Chinese edition
# (autograder/book_editions.py) adds its releases, the book's and the kit's catalogues and the code that reads them.
BOOK_SOURCES = ("_config.yml", "_toc.yml", "index.md", "chapters", "assets", "book_static", "attention_course",
                "autograder/kit.py", "autograder/book_site.py", "pyproject.toml", "requirements.txt",
                "chapters_zh", "book_templates", "locales/zh_CN/LC_MESSAGES/book.po", "autograder/book_editions.py",
                "autograder/notebook_text.py", "locales/zh_CN/LC_MESSAGES/kit.po", "autograder/kit_texts.py",
                "autograder/translations.py")
# Each edition: its folder in the site (English at the root, as every test here always had it).
EDITIONS = {edition.code: edition for edition in book_editions.EDITIONS}


def build_book() -> Path:
    """The book built with -W (warnings are errors), both editions, its html folder (the Chinese edition in its zh/
    folder, as scripts/build_book.sh lays it out). One build per content: the build lives in the temporary folder
    under a hash of BOOK_SOURCES, so this file and tests/test_book_walk.py (and a rerun with nothing changed) share
    it; a build that fails leaves nothing behind to reuse."""
    digest = hashlib.sha256()
    for name in BOOK_SOURCES:
        for path in sorted(p for p in [ROOT / name, *(ROOT / name).rglob("*")]
                           if p.is_file() and "__pycache__" not in p.parts):
            digest.update(path.relative_to(ROOT).as_posix().encode() + b"\0" + path.read_bytes())
    cache = Path(tempfile.gettempdir()) / f"attention-book-{digest.hexdigest()[:16]}"
    html = cache / "_build" / "html"
    # One builder at a time across xdist workers (tests/test_kit.py builds it too): the second waits, then reuses.
    with open(Path(tempfile.gettempdir()) / "attention-book.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (html / "index.html").is_file():
            _build_into(cache)
    return html


def _build_into(cache: Path) -> None:
    """Build both editions into a fresh folder, then move it to ``cache`` in one rename."""
    for stale in Path(tempfile.gettempdir()).glob("attention-book-*"):  # earlier contents' builds, not one in use
        if time.time() - stale.stat().st_mtime > 3600:
            shutil.rmtree(stale, ignore_errors=True)
    work = Path(tempfile.mkdtemp(prefix="attention-book-building-"))
    jupyter_book(work)
    for edition in book_editions.EDITIONS:
        if edition.site_dir:
            try:
                book_editions.build_edition(COURSE, edition, work / "_build" / "html", work / "editions" / edition.code)
            except RuntimeError as e:
                shutil.rmtree(work, ignore_errors=True)
                pytest.fail(str(e))
    shutil.rmtree(work / "editions", ignore_errors=True)  # its generated source and Sphinx's working files
    try:
        work.rename(cache)
    except OSError:  # another run (another checkout's suite) finished the same build first
        shutil.rmtree(work, ignore_errors=True)


def jupyter_book(work: Path, *options: str) -> Path:
    """``jupyter-book build`` of the repository into ``work`` with -W and ``options``; its html folder. A build that
    fails leaves nothing behind."""
    jb = Path(sys.executable).parent / "jupyter-book"
    done = subprocess.run([str(jb), "build", str(ROOT), "--path-output", str(work), "-W", "--keep-going", *options],
                          capture_output=True, text=True, timeout=900)
    problems = [l for l in (done.stdout + done.stderr).splitlines() if "WARNING" in l or "ERROR" in l]
    if done.returncode != 0:
        shutil.rmtree(work, ignore_errors=True)
    assert done.returncode == 0, "the book does not build with -W:\n" + "\n".join(problems or [done.stdout[-3000:]])
    assert (work / "_build" / "html" / "index.html").is_file()
    return work / "_build" / "html"


@pytest.fixture(scope="module")
def book():
    return build_book()


@pytest.fixture(scope="module")
def server(book):
    class QuietHandler(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    handler = functools.partial(QuietHandler, directory=str(book))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def browser():
    b = Browser()
    yield b
    b.close()


@pytest.mark.parametrize("edition", EDITIONS)
def test_only_toc_files_are_built(book, edition):
    site = book / EDITIONS[edition].site_dir
    pages = {p.relative_to(site).as_posix() for p in site.rglob("*.html")}
    chapters = {p for p in pages if p.startswith("chapters/")}
    assert chapters == {f"{c}.html" for c in PAGES}
    assert not any(p.startswith(("solutions/", "tests/", "grading/", "chapters_zh/", "locales/")) or p == "README.html"
                   for p in pages), "files outside _toc.yml were built"
    assert "index.html" in pages


def edition_pages(book: Path, edition) -> list[Path]:
    """Every page of ``edition``'s site (the English one without the Chinese edition's folder; not the theme's
    template snippets in ``_static``)."""
    site = book / edition.site_dir
    inner = [book / e.site_dir for e in book_editions.EDITIONS if e.site_dir and e is not edition]
    return sorted(p for p in site.rglob("*.html") if not any(p.is_relative_to(i) for i in inner)
                  and not p.relative_to(site).parts[0].startswith("_"))


@pytest.mark.parametrize("edition", EDITIONS)
def test_every_page_links_to_the_same_page_in_the_other_edition_and_back(book, edition):
    """The language switch (book_templates/language-switch.html): one link on every page, front page, chapters,
    search and index alike, to the page of the same name in the other edition, whose switch leads back here."""
    this = EDITIONS[edition]
    other = book_editions.other_edition(this)
    pages = edition_pages(book, this)
    assert len(pages) >= len(PAGES) + 3, [p.name for p in pages]
    for page in pages:
        switches = [href for href, _, label in anchors(page, "language-switch")]
        assert len(switches) == 1, f"{page.relative_to(book)}: {len(switches)} language switches"
        target = book / linked_file(book, page, switches[0])
        assert target.is_file(), f"{page.relative_to(book)}: its switch leads nowhere ({switches[0]})"
        assert target.relative_to(book / other.site_dir) == page.relative_to(book / this.site_dir)
        back = [href for href, _, _ in anchors(target, "language-switch")]
        assert len(back) == 1 and book / linked_file(book, target, back[0]) == page, (
            f"{target.relative_to(book)} does not switch back to {page.relative_to(book)}")
        label = [label.strip() for _, _, label in anchors(page, "language-switch")][0]
        assert label == other.label


def test_book_uses_no_network_resources(book):
    for page in book.rglob("*.html"):
        text = page.read_text(errors="replace")
        for attr in ('src="http', "src='http", 'href="https://cdn', "cdn.jsdelivr", "unpkg.com"):
            assert attr not in text, f"{page.relative_to(book)} loads something from the network ({attr})"


def test_landing_page_explains_the_course(server, browser):
    page = browser.open(f"{server}/index.html", "true")
    text = page.evaluate("document.body.innerText")
    for phrase in ("How to use this course", "nbval", "Chapters"):
        assert phrase in text
    links = page.evaluate("Array.from(document.querySelectorAll('a')).map(a => a.getAttribute('href'))")
    for chapter in PAGES:
        assert any(l and l.endswith(chapter + ".html") for l in links), f"no link to {chapter}"
    assert not page.errors, page.errors
    page.close()


def chinese_share(text: str) -> tuple[int, float]:
    """(Chinese characters in ``text``, their share of its letters): a translated chapter keeps some English (the
    terms in parentheses at first use, names such as softmax or PyTorch), an untranslated one has next to none."""
    chinese = len(re.findall(r"[\u4e00-\u9fff]", text))
    latin = len(re.findall(r"[A-Za-z]", text))
    return chinese, chinese / max(1, chinese + latin)


def search_index(site: Path) -> dict:
    text = (site / "searchindex.js").read_text()
    return json.loads(text[text.index("(") + 1:text.rindex(")")])


def test_the_chinese_search_finds_chinese_words(book):
    """Sphinx indexes a Chinese page's words only when jieba splits them (requirements.txt): without it zh/'s index
    held only Latin words and no Chinese query found a page. A glossary term of the chapters' text, 掩码 (mask),
    leads to the chapters that teach masking."""
    index = search_index(book / book_editions.CHINESE.site_dir)
    documents = {n: name for n, name in enumerate(index["docnames"])}
    found = set()
    for table in ("terms", "titleterms"):
        where = index[table].get("掩码", [])
        found |= {documents[n] for n in ([where] if isinstance(where, int) else where)}
    assert {f"chapters/{c}/{c}" for c in ("03_scoring_functions", "08_transformer")} <= found, sorted(found)


def test_the_chinese_front_page_is_the_front_page_in_chinese(server, browser):
    """zh/index.html: the front page's text from book.po (its headings, the course's title in the navigation and
    the chapters' caption), links to every Chinese chapter page, and a clean console."""
    page = browser.open(f"{server}/zh/index.html", "true")
    assert page.evaluate("document.documentElement.lang") == "zh-CN"
    text = page.evaluate("document.body.innerText")
    for phrase in ("从零实现注意力机制", "如何使用本课程", "全书通用的约定", "各章", "nbval"):
        assert phrase in text, f"{phrase!r} is not on the Chinese front page"
    assert "How to use this course" not in text
    chinese, share = chinese_share(page.evaluate("(() => { const m = document.querySelector('main').cloneNode(true);"
                                                 " m.querySelectorAll('pre, code').forEach(e => e.remove());"
                                                 " return m.textContent; })()"))
    assert chinese >= 800 and share >= 0.6, f"{chinese} Chinese characters, {share:.0%} of the letters"
    links = page.evaluate("Array.from(document.querySelectorAll('main a')).map(a => a.href)")
    for chapter in PAGES:
        assert f"{server}/zh/{chapter}.html" in links, f"no link to the Chinese {chapter}"
    assert not page.errors, page.errors
    page.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("edition", EDITIONS)
@pytest.mark.parametrize("chapter", PAGES)
def test_chapter_page_renders(server, browser, chapter, edition):
    """Each chapter's page in each edition: typeset math and no TeX left, its figures and its notebook's download;
    the Chinese edition's page in Chinese (the language Sphinx was told, and Chinese prose)."""
    where = f"{EDITIONS[edition].site_dir}/" if EDITIONS[edition].site_dir else ""
    page = browser.open(f"{server}/{where}{chapter}.html", MATH_DONE, timeout=60)
    typeset = page.evaluate("document.querySelectorAll('mjx-container').length")
    assert typeset >= 5, f"only {typeset} typeset formulas"
    # The prose, without code and outputs (where `$` and backslashes are legitimate): every formula typeset.
    prose = page.evaluate("(() => { const m = document.querySelector('main').cloneNode(true);"
                          " m.querySelectorAll('pre, code, script, style, .cell_output, .highlight, mjx-container')"
                          ".forEach(e => e.remove());"
                          " return m.textContent; })()")
    if EDITIONS[edition].site_dir:
        assert page.evaluate("document.documentElement.lang") == EDITIONS[edition].hreflang
        chinese, share = chinese_share(prose)
        assert chinese >= 1000 and share >= 0.6, (
            f"the Chinese page reads as English: {chinese} Chinese characters, {share:.0%} of its letters "
            f"(is chapters_zh/{Path(chapter).name} released? python -m autograder release)")
        heading = page.evaluate("document.querySelector('main h1').textContent")
        assert chinese_share(heading)[0] > 0, f"the chapter's title is not Chinese: {heading!r}"
    for raw in ("\\(", "\\[", "$$"):
        assert raw not in prose, f"raw TeX delimiter {raw!r} left on the page"
    left = re.search(r"\$[^$\n]{1,200}\$|\\[a-zA-Z]{2,}", prose)
    assert not left, f"raw TeX left on the page: ...{prose[max(0, left.start() - 40):left.end() + 40]!r}..."
    images = page.evaluate("Array.from(document.querySelectorAll('main img')).map(i => [i.currentSrc, i.complete && i.naturalWidth > 0])")
    assert len(images) >= 1, "expected figures on the chapter page"
    broken = [src for src, ok in images if not ok]
    assert not broken, f"figures that did not load: {broken}"
    assert any(src.endswith(".svg") for src, _ in images), "no schematic diagram (SVG) on the page"
    download = page.evaluate("Array.from(document.querySelectorAll('a')).some(a => (a.getAttribute('href') || '').endsWith('.ipynb'))")
    assert download, "no download link for the notebook"
    assert not page.errors, f"console/network errors: {page.errors}"
    page.close()


@pytest.mark.timeout(60)
def test_a_page_behind_another_still_settles_and_a_closed_page_leaves_no_tab(server, browser):
    """Page.settle waits for drawn frames, which a tab behind another never draws: it brings its page to the front
    (without that, it failed after 5 s). Page.close closes the tab, not only the connection."""
    first = browser.open(f"{server}/index.html", "true")
    second = browser.open(f"{server}/{PAGES[0]}.html", "true")
    assert first.evaluate("document.visibilityState") == "hidden"  # the second tab is in front
    first.settle()
    assert first.evaluate("document.visibilityState") == "visible"
    first.close()
    second.close()
    deadline = time.monotonic() + 10  # Chromium closes a tab after answering the request
    while {first.id, second.id} & browser.tabs() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not {first.id, second.id} & browser.tabs(), "a closed page's tab is still open"


@pytest.mark.timeout(120)
def test_code_cells_wrap_at_the_column_width(server, browser):
    """No code cell or printed output scrolls sideways at a laptop's window width (book_static/wrap-code.css),
    on a page whose longest lines are wider than its column (shown by switching the wrapping off)."""
    page = browser.open(f"{server}/{PAGES[-1]}.html", "true", timeout=60)
    page._send("Emulation.setDeviceMetricsOverride", width=1024, height=800, deviceScaleFactor=1, mobile=False)
    page.settle()
    overflowing = "Array.from(document.querySelectorAll('div.cell pre')).filter(p => p.scrollWidth > p.clientWidth + 1).length"
    total = page.evaluate("document.querySelectorAll('div.cell pre').length")
    wide = page.evaluate(overflowing)
    page.evaluate("document.querySelectorAll('div.cell pre').forEach(p => p.style.whiteSpace = 'pre'), true")
    unwrapped = page.evaluate(overflowing)
    assert total > 10, f"expected code cells on the page, found {total}"
    assert unwrapped > 0, "no code line is wider than the column even unwrapped: this page cannot show wrapping"
    assert wide == 0, f"{wide} of {total} code blocks scroll sideways"
    page.close()


# -- the book as the front door: the course kit on the site, and launch links only where configured ------------


class _Anchors(html.parser.HTMLParser):
    """Every ``<a>`` of a page as (href, title, its text); with ``css_class``, only those of that class."""

    def __init__(self, css_class: str | None = None):
        super().__init__()
        self.found, self._open, self._class = [], [], css_class

    def handle_starttag(self, tag, attrs):
        if tag == "a" and (self._class is None or self._class in (dict(attrs).get("class") or "").split()):
            self._open.append([dict(attrs).get("href"), dict(attrs).get("title") or "", ""])
        elif tag == "a":
            self._open.append(None)  # an anchor left out: its end tag closes it

    def handle_data(self, data):
        for a in self._open:
            if a is not None:
                a[2] += data

    def handle_endtag(self, tag):
        if tag == "a" and self._open:
            a = self._open.pop()
            if a is not None:
                self.found.append(tuple(a))


def anchors(page: Path, css_class: str | None = None) -> list[tuple[str | None, str, str]]:
    parser = _Anchors(css_class)
    parser.feed(page.read_text())
    return parser.found


def page_text(page: Path) -> str:
    """What a reader reads on the page: the text without tags (code highlighting splits a line into spans)."""
    text = re.sub(r"<script.*?</script>|<style.*?</style>", "", page.read_text(), flags=re.S)
    return " ".join(html.unescape(re.sub(r"<[^>]+>", "", text)).split())


def linked_file(book_html: Path, page: Path, href: str) -> Path:
    """The site's file that ``href`` (relative, as in the page) names, resolved as a browser resolves it."""
    assert not urllib.parse.urlsplit(href).scheme, f"{href} leaves the site"
    return Path(os.path.normpath(page.parent / urllib.parse.unquote(href))).relative_to(book_html)


@pytest.mark.parametrize("page", ["index", *PAGES])
def test_the_front_page_and_every_chapter_page_offer_the_course_kit(book, page):
    """"Get the course kit" with the wheel's one-line install and the whole kit's zip, both lying in the built site
    where the page's links say, the zip holding the same wheel and every chapter. The text is kit.install_markdown's:
    the chapter's notebook carries it (its first cell), the front page renders it ({course-kit})."""
    html_page = book / f"{page}.html"
    wheel = kit.wheel_filename(COURSE)
    text = page_text(html_page)
    assert "Get the course kit." in text and kit.pip_line(wheel) in text, f"{page}: no install text"
    links = {Path(href).name: linked_file(book, html_page, href) for href, _, _ in anchors(html_page)
             if href and href.endswith((".whl", ".zip"))}
    assert links == {wheel: Path(kit.SITE_WHEELS) / wheel, kit.SITE_ZIP: Path(kit.SITE_ZIP)}, links
    site_wheel = (book / links[wheel]).read_bytes()
    with zipfile.ZipFile(book / links[kit.SITE_ZIP]) as whole:
        names = set(whole.namelist())
        assert whole.read(f"attention-kit/wheels/{wheel}") == site_wheel, "the zip's wheel is not the site's"
    assert {f"attention-kit/{c}.ipynb" for c in PAGES} | {"attention-kit/README.md"} <= names


@pytest.mark.parametrize("page", ["index", *PAGES])
def test_the_chinese_edition_hands_out_the_chinese_kit(book, page):
    """zh/ has a kit of its own, linked from its front page and every chapter page with the install text in Chinese
    (kit.po): the zip holds the Chinese releases (what `python -m autograder kit --lang zh` writes) and the same wheel
    as zh/wheels/, a wheel whose messages default to Chinese."""
    site = book / book_editions.CHINESE.site_dir
    html_page = site / f"{page}.html"
    wheel = kit.wheel_filename(COURSE)
    text = page_text(html_page)
    chinese_install = kit.texts_in(COURSE, book_editions.CHINESE.locale).install
    lead = re.match(r"\*\*(.+?)\*\*", chinese_install).group(1)  # "Get the course kit." in Chinese
    assert chinese_share(lead)[0] > 0 and lead in text and kit.pip_line(wheel) in text, f"{page}: no Chinese install text"
    links = {Path(href).name: linked_file(book, html_page, href) for href, _, _ in anchors(html_page)
             if href and href.endswith((".whl", ".zip"))}
    zh = Path(book_editions.CHINESE.site_dir)
    assert links == {wheel: zh / kit.SITE_WHEELS / wheel, kit.SITE_ZIP: zh / kit.SITE_ZIP}, links
    if page != "index":
        return  # the zip is the same for every page: read it once
    with zipfile.ZipFile(book / links[kit.SITE_ZIP]) as whole:
        assert whole.read(f"attention-kit/wheels/{wheel}") == (book / links[wheel]).read_bytes()
        for chapter in PAGES:
            shipped = json.loads(whole.read(f"attention-kit/{chapter}.ipynb"))
            release = json.loads(COURSE.translated_release_notebook(Path(chapter).name,
                                                                     book_editions.CHINESE.locale).read_text())
            assert [c["source"] for c in shipped["cells"]] == [
                c["source"] for c in release["cells"] if c.get("id") != kit_texts.GENERATED_NOTE_ID], (
                f"the Chinese kit's {chapter} is not the Chinese release")
    with zipfile.ZipFile(book / links[wheel]) as built:
        assert built.read(f"attention_course/{kit.KIT_LANGUAGE_FILE}").decode().strip() == "zh_CN"


def test_no_launch_link_and_no_dead_link_by_default(book):
    """_config.yml ships both launch URLs empty: no page offers a launch button, and no link points nowhere."""
    for page in sorted(book.rglob("*.html")):
        where = page.relative_to(book)
        for href, title, label in anchors(page):
            assert href is not None and href.strip() != "", f"{where}: a link with an empty target ({label.strip()!r})"
            assert "git-pull" not in href and "Launch" not in title, f"{where}: a launch link {href}"
        assert "launch-buttons" not in page.read_text(), f"{where}: a launch menu"


# A learner repository on a host the theme does not know (the hub test serves one on 127.0.0.1), and a hub below a
# path prefix, as a university's hub often is.
LAUNCH_REPO = "http://127.0.0.1:8722/course/attention-kit"
LAUNCH_HUB = "https://hub.example.edu/attention/"


@pytest.fixture(scope="module")
def launch_book(tmp_path_factory) -> Path:
    """The book built once more, with _config.yml's two launch URLs set (a copy of it: the repository's stays empty).
    The whole book: a full build costs about as much as the kit it bundles (see the commit's figures)."""
    config = yaml.safe_load((ROOT / "_config.yml").read_text())
    config["repository"]["url"] = LAUNCH_REPO
    config["launch_buttons"]["jupyterhub_url"] = LAUNCH_HUB
    tmp = tmp_path_factory.mktemp("launch-book")
    (tmp / "_config.yml").write_text(yaml.safe_dump(config))
    return jupyter_book(tmp / "out", "--config", str(tmp / "_config.yml"))


def test_with_both_urls_set_every_chapter_page_launches_its_notebook_on_the_hub(launch_book):
    """Each chapter page's "Launch on JupyterHub" is nbgitpuller's link on that hub: pull the learner repository
    (its branch) into the learner's home and open, in JupyterLab, the chapter's notebook where the pull puts it
    (nbgitpuller clones into a folder named as the repository's last path part). The front page has none."""
    hub = urllib.parse.urlsplit(LAUNCH_HUB)
    with zipfile.ZipFile(launch_book / kit.SITE_ZIP) as whole:
        in_kit = set(whole.namelist())
    for chapter in PAGES:
        links = [href for href, title, _ in anchors(launch_book / f"{chapter}.html") if title == "Launch on JupyterHub"]
        assert len(links) == 1, f"{chapter}: {len(links)} launch links"
        url = urllib.parse.urlsplit(links[0])
        assert (url.scheme, url.netloc, url.path) == (hub.scheme, hub.netloc,
                                                      hub.path.rstrip("/") + "/hub/user-redirect/git-pull")
        query = urllib.parse.parse_qs(url.query, strict_parsing=True)
        assert query == {"repo": [LAUNCH_REPO], "branch": ["main"],
                         "urlpath": [f"lab/tree/{LAUNCH_REPO.rsplit('/', 1)[1]}/{chapter}.ipynb"]}, query
        assert f"attention-kit/{chapter}.ipynb" in in_kit, "the learner repository (the kit) has no such notebook"
    assert not [a for a in anchors(launch_book / "index.html") if "git-pull" in (a[0] or "")]

