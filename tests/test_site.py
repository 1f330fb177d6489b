"""The reference site: strict build, a real headless Chromium, and contract edits that show up."""
from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fuel_cy.contract import load_contracts

from conftest import ROOT, system_tool

pytestmark = pytest.mark.browser
ARTIFACTS = ROOT / "test-artifacts"


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
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
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
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,1600"):
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(chromedriver), options=opts)
    yield driver
    driver.quit()


def _severe(driver):
    return [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]


KERNELS = [k for d in load_contracts(ROOT / "contracts") for k in d.kernels]


def test_home_page_renders(browser, server):
    browser.get(server + "/")
    assert "fuel_cy" in browser.title
    h1 = browser.find_element("css selector", "article h1")
    assert h1.text == "fuel_cy"
    assert "pip install" in browser.find_element("css selector", "article").text
    assert not _severe(browser)


@pytest.mark.parametrize("kernel", KERNELS, ids=[k.name for k in KERNELS])
def test_kernel_page_shows_its_inputs_table(browser, server, kernel):
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(f"{server}/kernels/{kernel.name}/")
    # read cell text from the DOM (textContent), independent of scrolling and visibility; wait
    # for both tables, as the page can still be rendering when get() returns (seen flaky)
    script = """
        return Array.from(document.querySelectorAll('article table')).map(t => ({
            head: Array.from(t.querySelectorAll('th')).map(c => c.textContent.trim()),
            rows: Array.from(t.querySelectorAll('tbody tr')).map(r =>
                Array.from(r.querySelectorAll('td')).map(c => c.textContent.trim()))}));"""

    def both_tables(b):
        tables = b.execute_script(script)
        heads = [t["head"][:3] for t in tables]
        return tables if ["#", "name", "dtypes"] in heads and any(h[:2] == ["output", "dtype rule"] for h in heads) else None

    tables = WebDriverWait(browser, 15).until(both_tables)
    inputs = next(t for t in tables if t["head"][:3] == ["#", "name", "dtypes"])
    assert [row[1] for row in inputs["rows"]] == [i.name for i in kernel.inputs]
    returns = next(t for t in tables if t["head"][:2] == ["output", "dtype rule"])
    assert [row[0] for row in returns["rows"]] == [o.name for o in kernel.returns.items]
    assert kernel.blurb[:40] in browser.find_element("css selector", "article").text
    assert not _severe(browser)
    if kernel.name == "attention_paged_naive":
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "kernel_page.png"))
        assert (ARTIFACTS / "kernel_page.png").stat().st_size > 10_000


def test_search_finds_the_paged_kernel(browser, server):
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/")
    box = WebDriverWait(browser, 10).until(ec.element_to_be_clickable(("css selector", "input.md-search__input")))
    box.click()
    box.send_keys("paged")
    results = "Array.from(document.querySelectorAll('.md-search-result__item')).map(e => e.textContent).join(' ')"
    WebDriverWait(browser, 20).until(lambda d: "attention_paged_naive" in d.execute_script("return " + results))
    assert not _severe(browser)


def test_api_page_shows_real_signatures(browser, server):
    browser.get(server + "/api/")
    text = browser.find_element("css selector", "article").text
    # mkdocstrings may wrap long signatures one parameter per line (when a formatter is installed)
    flat = "".join(text.split())
    assert "attention_flash(q,k,v,alibi_slopes=None,*,softmax_scale=None,causal=False" in flat
    for name in ("window_size_left", "k_len", "softcap", "InputError", "dispatch", "KernelEntry"):
        assert name in text
    assert not _severe(browser)


def test_editing_a_contract_changes_the_page(tmp_path):
    proj = tmp_path / "proj"
    ignore = shutil.ignore_patterns("*.so", "*.c", "__pycache__", "build")
    for name in ("contracts", "templates", "fuel_cy", "site", "benchmarks"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, proj / name, ignore=ignore)
    shutil.copy(ROOT / "mkdocs.yml", proj / "mkdocs.yml")
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
    naive = (out / "kernels" / "attention_naive" / "index.html").read_text()
    assert "attention_sink" not in naive
