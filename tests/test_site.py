"""The reference site: strict build, a real headless Chromium, and contract edits that show up.

The browser checks look at what a reader sees at 1400 px: nothing in the text column scrolls
sideways, every kernel parameter is described (kernel pages and API reference) in Python types,
the contract's Rust-side provenance stays in the collapsed "Contract" box, plot labels render at
10 px or more, and no page logs an error. Screenshots of a kernel page, the API page and the
Performance page go to test-artifacts/ (FUEL_CY_SHOTS=<dir> sends them elsewhere)."""
from __future__ import annotations

import functools
import html.parser
import http.server
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fuel_cy.contract import load_contracts

from conftest import ROOT, system_tool

pytestmark = pytest.mark.browser
ARTIFACTS = Path(os.environ.get("FUEL_CY_SHOTS") or ROOT / "test-artifacts")
WIDTH = 1400
RUST = re.compile(r"Option<|\busize\b|DynScalar|DimRef\(|fuel_reference_backend::|kernel\.rs|§\d|method descriptor")


def build_site(project: Path, out: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": str(project)}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out)],
                          cwd=project, capture_output=True, text=True, env=env, timeout=600)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    r = build_site(ROOT, out)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "WARNING" not in r.stderr, r.stderr
    return out


@pytest.fixture(scope="module")
def server(site):
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):  # noqa: D401 - keep the test output clean
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


@pytest.fixture(scope="module")
def browser():
    chromium = system_tool("chromium", "chromium-browser", why="the site's real-browser checks")
    chromedriver = system_tool("chromedriver", why="Debian's chromium-driver, for the site's real-browser checks")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={WIDTH},1000", "--hide-scrollbars"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=opts)
    yield driver
    driver.quit()


def _severe(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


def _open(driver, url: str) -> None:
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(url)
    WebDriverWait(driver, 15).until(lambda d: d.execute_script(
        "return document.readyState === 'complete' && !!document.querySelector('.md-content article')"))


def _screenshot(driver, name: str) -> Path:
    """A full-page screenshot at WIDTH px."""
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(WIDTH, min(height + 120, 16000))
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    driver.save_screenshot(str(path))
    driver.set_window_size(WIDTH, 1000)
    assert path.stat().st_size > 10_000
    return path


KERNELS = [k for d in load_contracts(ROOT / "contracts") for k in d.kernels]

# every visible table row of the main column, cells as text (textContent: independent of scrolling)
TABLES = """
return Array.from(document.querySelectorAll('article table')).filter(t => !t.closest('details')).map(t => ({
    head: Array.from(t.querySelectorAll('th')).map(c => c.textContent.trim()),
    rows: Array.from(t.querySelectorAll('tbody tr')).map(r =>
        Array.from(r.querySelectorAll('td')).map(c => c.textContent.trim()))}));"""

# the main text a reader sees without opening the collapsed boxes
VISIBLE_TEXT = """
const a = document.querySelector('article').cloneNode(true);
a.querySelectorAll('details, script, style').forEach(e => e.remove());
return a.textContent;"""


def test_home_page_renders(browser, server):
    _open(browser, server + "/")
    assert "fuel_cy" in browser.title
    h1 = browser.find_element("css selector", "article h1")
    assert h1.text == "fuel_cy"
    assert "pip install" in browser.find_element("css selector", "article").text
    assert not _severe(browser)


@pytest.mark.parametrize("kernel", KERNELS, ids=[k.name for k in KERNELS])
def test_kernel_page_documents_every_parameter_in_python_terms(browser, server, kernel):
    _open(browser, f"{server}/kernels/{kernel.name}/")
    tables = browser.execute_script(TABLES)
    params = next(t for t in tables if t["head"] == ["parameter", "type", "default", "description"])
    names = ([i.name for i in kernel.inputs] + [f.name for f in kernel.op_params.fields]
             + [o.caller_buffer for o in kernel.returns.items if o.caller_buffer])
    assert [row[0] for row in params["rows"]] == names
    for name, typ, default, description in params["rows"]:
        assert description and "not described" not in description, name
        assert re.fullmatch(r"numpy\.ndarray( \| None)?|(float|int|bool)( \| None)?", typ), (name, typ)
        assert default == "required" or default in ("None", "False", "True"), (name, default)
    returns = next(t for t in tables if t["head"] == ["name", "type", "description"])
    assert [row[0] for row in returns["rows"]] == [o.name for o in kernel.returns.items]
    assert all(row[2] for row in returns["rows"])
    # the signature, one argument per line, in Python types
    signature = browser.find_element("css selector", "article pre").text
    assert signature.startswith(f"fuel_cy.{kernel.name}(") and signature.count("\n") >= len(names)
    # the contract's own terms are in the collapsed Contract box only, and the box is closed
    visible = browser.execute_script(VISIBLE_TEXT)
    assert not RUST.search(visible), RUST.search(visible)
    details = browser.find_elements("css selector", "article details")
    assert details and not any(d.get_attribute("open") for d in details)
    contract = details[-1].get_attribute("textContent")
    assert kernel.entry_point in contract and kernel.blurb[:40] in contract
    # a runnable example, and the masks as pictures where the kernel has mask params
    examples = [p.text for p in browser.find_elements("css selector", "article pre") if ">>> " in p.text]
    assert any(f"fuel_cy.{kernel.name}(" in e for e in examples)
    if {"causal", "window_size_left"} & set(names) or "block_table" in names:
        assert browser.find_elements("css selector", "article svg.fc-mask")
    assert not _severe(browser)
    if kernel.name == "attention_paged_naive":
        _screenshot(browser, "kernel_page")


# what each Python-session block's copy button puts on the clipboard (site/javascripts/copy-code.js)
COPIED = """
const out = [];
for (const b of document.querySelectorAll('article [data-clipboard-target]')) {
  const code = document.querySelector(b.getAttribute('data-clipboard-target'));
  if (!code || !/^>>>( |$)/m.test(code.textContent)) continue;
  b.click();
  out.push(b.getAttribute('data-copied'));
}
return out;"""


@pytest.mark.parametrize("page", ["getting-started", "semantics", "torch"])
def test_copy_buttons_copy_code_that_runs(browser, server, page):
    """A session block's copy button gives the code without its prompts and output: every block
    compiles, none keeps a prompt, and the page's blocks in order run as one script."""
    _open(browser, f"{server}/{page}/")
    copied = browser.execute_script(COPIED)
    assert copied and all(c is not None for c in copied), copied
    for text in copied:
        assert ">>>" not in text
        compile(text, f"<copied from {page}>", "exec")
    if page == "getting-started":
        r = subprocess.run([sys.executable, "-c", "".join(copied)], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
        assert r.returncode == 0, r.stderr[-2000:]


# ... and each shell-session (`console`) block's
COPIED_COMMANDS = """
const out = [];
for (const b of document.querySelectorAll('article [data-clipboard-target]')) {
  const code = document.querySelector(b.getAttribute('data-clipboard-target'));
  if (!code || !code.querySelector('span.gp') || !/^[$] /m.test(code.textContent)) continue;
  b.click();
  out.push([code.textContent, b.getAttribute('data-copied')]);
}
return out;"""


def test_copy_buttons_of_shell_sessions_copy_the_commands_only(browser, server):
    """A `console` block's copy button gives its `$ ` lines without the prompt, output dropped:
    each line is a `fuel-cy` command the CLI has."""
    from fuel_cy.cli import build_parser

    commands = set(build_parser()._subparsers._group_actions[0].choices)
    _open(browser, f"{server}/cli/")
    copied = browser.execute_script(COPIED_COMMANDS)
    assert copied
    for shown, text in copied:
        assert text is not None, shown
        lines = text.rstrip("\n").split("\n")
        assert lines == [line[2:] for line in shown.rstrip("\n").split("\n") if line.startswith("$ ")]
        for line in lines:
            assert line.split()[0] == "fuel-cy" and line.split()[1] in commands, line


def test_a_kernel_pages_parameter_table_reads_on_a_phone(browser, server):
    """At 390 px each parameter is a block: its description starts at the left of the text column
    and has most of the screen's width, and no cell runs past the screen's edge."""
    browser.set_window_size(390, 900)
    try:
        _open(browser, f"{server}/kernels/attention_masked/")
        cells = browser.execute_script("""
const vw = document.documentElement.clientWidth;
const col = document.querySelector('article').getBoundingClientRect();
return {vw: vw, left: col.left, cells: Array.from(document.querySelectorAll('.fc-params td')).map((c, i) => {
  const r = c.getBoundingClientRect(); return {last: c === c.parentElement.lastElementChild, left: r.left,
  right: r.right, width: r.width}; })};""")
    finally:
        browser.set_window_size(WIDTH, 1000)
    vw = cells["vw"]
    assert cells["cells"]
    for c in cells["cells"]:
        assert c["right"] <= vw + 1, c
        if c["last"]:   # the description
            assert c["left"] <= cells["left"] + 40 and c["width"] >= 0.6 * vw, c


def test_kernel_index_has_the_feature_matrix_read_from_the_contracts(browser, server):
    _open(browser, f"{server}/kernels/")
    tables = browser.execute_script(TABLES)
    first = next(t for t in tables if t["head"][:3] == ["kernel", "dtypes", "math"])
    second = next(t for t in tables if t["head"][:2] == ["kernel", "varlen"])
    rows = {r[0]: dict(zip(first["head"], r)) for r in first["rows"]}
    for r in second["rows"]:
        rows[r[0]].update(zip(second["head"], r))
    assert set(rows) == {k.name for k in KERNELS}
    for k in KERNELS:
        params = {f.name for f in k.op_params.fields}
        inputs = {i.name for i in k.inputs}
        row = rows[k.name]
        assert (row["round_p"] == "yes") == ("round_p" in params)
        assert (row["masks"] == "yes") == ("attn_mask" in inputs)
        assert (row["varlen"] == "yes") == ("cu_seqlens_q" in inputs)
        assert (row["ALiBi"] == "yes") == ("alibi_slopes" in inputs)
        assert row["dtypes"] == ", ".join(d.lower() for d in k.float_dtypes)


def test_kernel_pages_show_recorded_speed_against_torch(browser, server):
    """From benchmarks/results/*/bench.json: each measured kernel's page has the table, stamped
    with the CPU; a math-in-T kernel points bf16/f16 users at a float32-math one."""
    for name in ("attention_flash", "attention_flash_mixed", "attention_masked", "attention_varlen"):
        _open(browser, f"{server}/kernels/{name}/")
        tables = browser.execute_script(TABLES)
        speed = next(t for t in tables if t["head"] == ["CPU", "dtype", "shape", "ms", "peer", "peer ms", "ratio"])
        assert speed["rows"] and all(r[4].startswith("torch") and r[6].endswith("×") for r in speed["rows"])
        assert all("threads" in r[0] for r in speed["rows"])
    _open(browser, f"{server}/kernels/attention_flash/")
    assert "attention_flash_mixed" in browser.find_element("css selector", "article .admonition.tip").text


def _site_pages(site: Path) -> list[str]:
    return sorted("/" if p.parent == site else f"/{p.parent.relative_to(site).as_posix()}/"
                  for p in site.rglob("index.html"))


OVERFLOW = """
const col = document.querySelector('.md-content').getBoundingClientRect();
const out = [];
for (const el of document.querySelectorAll('.md-content table, .md-content pre, .md-content pre > code, .md-content img, .md-content svg')) {
  if (el.closest('details:not([open])')) continue;
  const r = el.getBoundingClientRect();
  if (el.scrollWidth > el.clientWidth + 1 || r.right > col.right + 1)
    out.push(el.tagName + ' ' + el.scrollWidth + '/' + el.clientWidth + ': ' + (el.textContent || '').trim().slice(0, 60));
}
return out;"""


def test_nothing_scrolls_sideways_and_no_page_logs_an_error(browser, server, site):
    """At 1400 px no table, code block or picture of any page is wider than the text column."""
    problems = {}
    for page in _site_pages(site):
        _open(browser, server + page)
        bad = browser.execute_script(OVERFLOW)
        errors = [e["message"] for e in _severe(browser)]
        if bad or errors:
            problems[page] = bad + errors
    assert not problems, problems


def test_api_page_documents_the_public_names(browser, server):
    _open(browser, server + "/api/")
    article = browser.find_element("css selector", "article")
    visible = article.text
    assert not RUST.search(visible), RUST.search(visible)
    assert "_generated" not in visible
    for kernel in KERNELS:
        for module in ("fuel_cy", "fuel_cy.torch", "fuel_cy.dask"):
            assert browser.find_elements("id", f"{module}.{kernel.name}"), f"{module}.{kernel.name}"
        block = browser.execute_script(
            "return document.getElementById(arguments[0]).closest('.doc-object')", f"fuel_cy.{kernel.name}")
        # the signature: formatted, one argument per line
        signature = block.find_element("css selector", ".doc-signature").text
        assert signature.count("\n") >= len(kernel.inputs), signature
        # every parameter described, in Python types; returns one row per array; the raises
        sections = browser.execute_script("""
            const block = arguments[0].closest('.doc-object').querySelector('.doc-contents');
            const out = {};
            for (const t of block.querySelectorAll('table')) {
              let el = t;  // Material wraps tables in scroll containers: climb to the block's child
              while (el.parentElement && el.parentElement !== block) el = el.parentElement;
              const title = el.previousElementSibling ? el.previousElementSibling.textContent.trim() : '';
              out[title] = Array.from(t.querySelectorAll('tbody tr')).map(r =>
                  Array.from(r.querySelectorAll('td')).map(c => c.textContent.trim()));
            }
            return out;""", browser.find_element("id", f"fuel_cy.{kernel.name}"))
        params = sections["Parameters:"]
        names = ([i.name for i in kernel.inputs] + [f.name for f in kernel.op_params.fields]
             + [o.caller_buffer for o in kernel.returns.items if o.caller_buffer])
        assert [row[0] for row in params] == names
        for name, typ, description, default in params:
            assert description, (kernel.name, name)
            assert not RUST.search(typ), (kernel.name, name, typ)
        assert [row[0] for row in sections["Returns:"]] == [o.name for o in kernel.returns.items]
        assert [row[0] for row in sections["Raises:"]] == ["InputError", "MemoryError"]
    for name in ("dispatch", "KernelEntry", "InputError", "set_num_threads", "CostReport"):
        assert name in visible
    assert not _severe(browser)
    _screenshot(browser, "api_page")


def test_performance_plots_are_legible(browser, server, site):
    _open(browser, server + "/performance/")
    text = browser.find_element("css selector", "article").text
    assert not re.search(r"[Ii]ssue #\d", text)
    assert browser.find_elements("css selector", "article table")[0].get_attribute("textContent")
    # every CPU measured has its section
    import json

    results = ROOT / "benchmarks" / "results"
    cpus = {json.loads(p.read_text())["machine"]["cpu"]
            for p in [results / "bench.json", *results.glob("*/bench.json"), *results.glob("levels/*.json")] if p.exists()}
    assert cpus
    headings = [h.text for h in browser.find_elements("css selector", "article h2, article h3")]
    for cpu in cpus:
        assert any(h.startswith(cpu) for h in headings), (cpu, headings)
    images = browser.execute_script("""
        const imgs = Array.from(document.querySelectorAll('article img.fc-plot-img'));
        imgs.forEach(i => { i.loading = 'eager'; });  // the page loads them lazily, as they scroll in
        return Promise.all(imgs.map(i => i.decode().catch(() => null))).then(() => imgs.map(i => ({
            src: i.getAttribute('src'), natural: i.naturalWidth, shown: i.getBoundingClientRect().width,
            pt: parseFloat(i.dataset.fontPt), dpi: parseFloat(i.dataset.dpi)})));""")
    assert images, "no plots on the Performance page (is matplotlib installed?)"
    for img in images:
        assert img["natural"] > 0, img
        # the smallest label: pt * dpi / 72 pixels in the image, scaled to its size on the page
        px = img["pt"] * img["dpi"] / 72 * img["shown"] / img["natural"]
        assert px >= 10, (img, px)
    assert not _severe(browser)
    _screenshot(browser, "performance_page")


def test_search_finds_the_paged_kernel(browser, server):
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, server + "/")
    box = WebDriverWait(browser, 10).until(ec.element_to_be_clickable(("css selector", "input.md-search__input")))
    box.click()
    box.send_keys("paged")
    results = "Array.from(document.querySelectorAll('.md-search-result__item')).map(e => e.textContent).join(' ')"
    WebDriverWait(browser, 20).until(lambda d: "attention_paged_naive" in d.execute_script("return " + results))
    assert not _severe(browser)


@pytest.mark.parametrize("word", ["softcap", "window_size_left", "alibi_slopes"])
def test_search_ranks_a_defining_page_first(browser, server, word):
    """A parameter's name finds the pages that define it (Semantics, the kernel pages: their
    search boost) before the pages that only mention it."""
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    _open(browser, server + "/")
    box = WebDriverWait(browser, 10).until(ec.element_to_be_clickable(("css selector", "input.md-search__input")))
    box.click()
    box.send_keys(word)
    first = ("const a = document.querySelector('.md-search-result__item a'); return a ? a.getAttribute('href') : null")
    href = WebDriverWait(browser, 20).until(lambda d: d.execute_script(first))
    assert "/semantics/" in href or "/kernels/" in href, href


def test_editing_a_contract_changes_the_pages_of_an_unbuilt_checkout(tmp_path):
    """A copy of the checkout without the compiled extension (no fuel_cy/_generated/, as a fresh
    clone or a non-editable install leaves it) builds the site, and a contract edit shows up on
    the kernel page and in the API reference."""
    proj = tmp_path / "proj"
    ignore = shutil.ignore_patterns("*.so", "*.c", "__pycache__", "build", "_generated")
    for name in ("contracts", "templates", "fuel_cy", "site", "benchmarks", "overrides"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, proj / name, ignore=ignore)
    for name in ("mkdocs.yml", "pyproject.toml", "CHANGELOG.md"):
        shutil.copy(ROOT / name, proj / name)
    assert not (proj / "fuel_cy" / "_generated").exists()
    contract = proj / "contracts" / "fuel-reference-backend.md"
    text = contract.read_text()
    text = text.replace("FlashAttention-v2 forward; tiled online softmax", "EDITED BLURB for the flash kernel", 1)
    anchor = '      shape_constraint: "dim[0]=q.dim[1]"\n      optional: true\nop_params:\n  variant: FlashAttn # FusedOpParams::FlashAttn (fused namespace; §3.7)\n  fields:\n    softmax_scale: { kind: f32 }\n    causal: { kind: bool }\n    window_size_left: { kind: "Option<usize>" }\n    window_size_right: { kind: "Option<usize>" }\n    softcap: { kind: "Option<f32>" }\n    k_len: { kind: "Option<DynScalar>", note: "None ⇒ full Sk; rides'
    assert anchor in text
    text = text.replace(anchor, anchor.replace("      optional: true\nop_params:",
                                               "      optional: true\n    - name: attention_sink\n      dtypes: [F32]\n      rank: 1 # [Hq]\n      optional: true\nop_params:"), 1)
    contract.write_text(text)
    out = tmp_path / "out"
    r = build_site(proj, out)
    assert r.returncode == 0, r.stdout + r.stderr
    page = (out / "kernels" / "attention_flash" / "index.html").read_text()
    assert "EDITED BLURB for the flash kernel" in page and "attention_sink" in page
    # the new input has a row, with a placeholder that says where its description goes
    assert "python-api.yaml" in page
    naive = (out / "kernels" / "attention_naive" / "index.html").read_text()
    assert "attention_sink" not in naive
    api = (out / "api" / "index.html").read_text()
    assert 'id="fuel_cy.attention_flash"' in api and 'id="fuel_cy.torch.attention_paged_naive"' in api
    assert "attention_sink" in api


def test_every_page_shows_the_version_and_links_the_changelog(browser, server, site):
    """Every page's footer says `fuel_cy <version>` (pyproject.toml's, the one place it is
    written) and links the Changelog page, which is CHANGELOG.md as the repository has it. With
    no repo_url in mkdocs.yml (the project has no public repository yet) no repository is linked."""
    from fuel_cy.workspace import project_version

    version = project_version(ROOT)
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert f"\n## {version} - " in changelog, f"CHANGELOG.md has no section for {version}"
    footer = """
        const pick = s => document.querySelector('.md-footer ' + s);
        const shown = e => !!e && e.getBoundingClientRect().width > 0 && getComputedStyle(e).visibility !== 'hidden';
        const v = pick('.fc-version'), c = pick('a.fc-changelog');
        return {version: shown(v) ? v.textContent.trim() : null, changelog: shown(c) ? c.href : null,
                repository: !!pick('.fc-repository') || !!document.querySelector('.md-header .md-source')};"""
    problems = {}
    for page in _site_pages(site):
        _open(browser, server + page)
        seen = browser.execute_script(footer)
        if seen != {"version": f"fuel_cy {version}", "changelog": f"{server}/changelog/", "repository": False}:
            problems[page] = seen
    assert not problems, problems
    # the footer as a reader sees it at the bottom of a page
    _open(browser, server + "/cli/")
    browser.execute_script("window.scrollTo(0, document.documentElement.scrollHeight)")
    time.sleep(0.5)  # the header's title cross-fades to the page title as the page scrolls
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(ARTIFACTS / "footer.png"))
    # the link leads to the changelog, with this version's section, as CHANGELOG.md has it
    from selenium.webdriver.support.ui import WebDriverWait

    browser.find_element("css selector", ".md-footer a.fc-changelog").click()
    WebDriverWait(browser, 15).until(lambda d: d.current_url == f"{server}/changelog/" and d.execute_script(
        "return document.readyState === 'complete' && !!document.querySelector('.md-content article')"))
    assert browser.find_element("css selector", "article h1").text == "Changelog"
    headings = [h.text for h in browser.find_elements("css selector", "article h2")]
    first = changelog.split("\n## ", 2)
    assert headings[:2] == [line.split("\n", 1)[0] for line in first[1:3]], headings
    assert any(h.startswith(f"{version} - ") for h in headings), headings
    assert not _severe(browser)


# the project's internal vocabulary (the founding contract's Rust names, its executor and
# planner, our issue numbers): a reader of the user pages cannot act on them.  The pages about
# the contracts themselves (Architecture, Editing a contract) and the collapsed Contract boxes
# may name them.
INTERNAL = re.compile(r"\boracle\b|executor|FusedOpId|Op::\w+|planner|SymEnv|Tier-1|issue #\d+|Option<|DynScalar|"
                      r"fuel_reference_backend::|FLASH_ATTN arm", re.I)
DEVELOPER_PAGES = ("/architecture/", "/editing-contracts/")


class _ArticleText(html.parser.HTMLParser):
    """The text of a page's <article>, without its <details> boxes, scripts and styles."""

    def __init__(self) -> None:
        super().__init__()
        self.depth = {"article": 0, "details": 0, "script": 0, "style": 0}
        self.parts: list[str] = []

    def handle_starttag(self, tag, attrs):
        if tag in self.depth:
            self.depth[tag] += 1

    def handle_endtag(self, tag):
        if tag in self.depth and self.depth[tag]:
            self.depth[tag] -= 1

    def handle_data(self, data):
        d = self.depth
        if d["article"] and not (d["details"] or d["script"] or d["style"]):
            self.parts.append(data)


def test_user_pages_show_no_internal_words(site):
    found = {}
    for page in _site_pages(site):
        if page in DEVELOPER_PAGES:
            continue
        parser = _ArticleText()
        parser.feed((site / page.strip("/") / "index.html").read_text(encoding="utf-8"))
        text = " ".join(parser.parts)
        hits = sorted({m.group(0) for m in INTERNAL.finditer(text)})
        if hits:
            found[page] = hits
    assert not found, found


def test_kernel_sections_of_the_navigation_are_named_for_what_the_kernels_do(site):
    """Each contract's kernels sit under the name python-api.yaml gives them (`contracts:`), not
    the contract's provider id, and every contract has such a name."""
    from fuel_cy.codegen.pydocs import contract_title, python_api

    labels = re.findall(r'class="md-ellipsis">\s*([^<]*?)\s*<', (site / "index.html").read_text(encoding="utf-8"))
    api = python_api(ROOT / "contracts")
    for doc in load_contracts(ROOT / "contracts"):
        title = contract_title(api, Path(doc.path).name)
        assert title, f"contracts/python-api.yaml names no section for {Path(doc.path).name}"
        assert html.unescape(title) in [html.unescape(label) for label in labels], title
        assert doc.provider.name not in labels or doc.provider.name == "fuel_cy", doc.provider.name


def test_every_install_line_names_what_the_checkout_declares():
    """Each `pip install` on the user pages installs the checkout (`.`, `-e .`) with extras that
    pyproject.toml declares, and each `fuel-cy` command is one the CLI has: so they work as
    written from a checkout (the fresh-venv installs themselves run in test_distribution.py and
    in .ci/run)."""
    import tomllib

    from fuel_cy.cli import build_parser

    extras = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"])
    commands = set(build_parser()._subparsers._group_actions[0].choices)
    seen = 0
    # (the Changelog page renders CHANGELOG.md)
    for page in sorted((ROOT / "site").glob("*.md")) + [ROOT / "README.md", ROOT / "CHANGELOG.md"]:
        text = page.read_text(encoding="utf-8")
        for spec in re.findall(r"pip install (?:-q )?(?:-e )?['\"]?([^\s'\"`)]+)", text):
            if spec.startswith(("torch==", "transformers", "chromium", "$")):
                continue   # a peer's own package (torch's CPU build), not this checkout
            seen += 1
            m = re.fullmatch(r"\.(?:\[([\w,]+)\])?", spec)
            assert m, (page.name, spec)
            assert set(filter(None, (m.group(1) or "").split(","))) <= extras, (page.name, spec)
        for cmd in re.findall(r"fuel-cy ([a-z]+)", text):
            assert cmd in commands, (page.name, cmd)
    assert seen >= 5


def test_the_site_builds_from_a_checkout_with_no_install_and_no_pythonpath(tmp_path):
    """mkdocs run from elsewhere on this checkout's mkdocs.yml, with the environment's packages on
    the path but not its fuel_cy (`python -S` skips the .pth files, among them the editable
    install's finder): the hooks find the checkout's own fuel_cy by themselves."""
    import sysconfig

    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "PYTHONPATH": sysconfig.get_paths()["purelib"]}
    probe = subprocess.run([sys.executable, "-S", "-c", "import fuel_cy"], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=60)
    assert probe.returncode != 0 and "No module named 'fuel_cy'" in probe.stderr   # the premise
    r = subprocess.run([sys.executable, "-S", "-m", "mkdocs", "build", "--strict", "-q", "-f", str(ROOT / "mkdocs.yml"),
                        "-d", str(tmp_path / "site")], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert (tmp_path / "site" / "kernels" / "attention_masked" / "index.html").exists()
