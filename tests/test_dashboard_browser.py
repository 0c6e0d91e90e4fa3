"""End to end in a real headless Chromium (Debian's, never a downloaded one): `receipts dashboard` on a store
of real ingested data, every view visited, charts checked as painted by vega-embed, no exception shown.
Screenshots of each view land in the test's temp folder; with RECEIPTS_UPDATE_SCREENSHOTS=1, in docs/screenshots/
(the README's pictures: a test run left them rewritten in the work tree, one pixel of a timestamp apart).
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import urlencode

import pytest

import dashboard_store  # the AppTests' real-data store (tests/ is on the path)
from live_dashboard import CHARTS, CHROMIUM, chromium_page, free_port, serve_dashboard

REPO = Path(__file__).resolve().parents[1]
DOC_SHOTS = REPO / "docs" / "screenshots"

pytestmark = pytest.mark.browser


def wait_for_view(page, n_charts: int, timeout_ms: int = 30_000) -> None:
    """Charts painted, the script run finished, no exception on the page.

    Streamlit scrolls inside its own container, so a full-page screenshot is only as tall as the viewport:
    the viewport is made tall enough for every view instead."""
    page.wait_for_function(
        """([sel, n]) => {
            const charts = [...document.querySelectorAll(sel)].filter(e => e.getBoundingClientRect().width > 0);
            const running = document.querySelector('[data-testid="stStatusWidget"]')?.innerText?.includes('Running');
            return charts.length >= n && !running;
        }""", arg=[CHARTS, n_charts], timeout=timeout_ms)
    page.wait_for_timeout(300)  # let vega finish its last paint before a screenshot
    assert page.locator('[data-testid="stException"]').count() == 0, page.locator('[data-testid="stException"]').first.inner_text()
    body = page.inner_text("body")
    assert "Traceback" not in body and "Cannot open the store" not in body


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory):
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Debian chromium missing: run .ci/browser_setup.sh")
        pytest.skip("Debian chromium not installed (.ci/browser_setup.sh)")
    root = tmp_path_factory.mktemp("browser")
    db = root / "receipts.duckdb"
    ids = dashboard_store.build_store(db, root / "logs")
    with serve_dashboard(str(db), free_port()) as base:
        yield base, ids, root


def test_every_view_renders_charts_in_chromium(dashboard):
    base, ids, root = dashboard
    mod = dashboard_store
    shots = DOC_SHOTS if os.environ.get("RECEIPTS_UPDATE_SCREENSHOTS") == "1" else root / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    views = [
        ("lanes", {}, 1, "Lanes"),
        ("receipt", {"id": ids["rumor"]}, 3, "Fragmentation drift"),
        ("anatomy", {"id": ids["a"]}, 4, "Top kernels per category"),
        ("compare", {"a": ids["a"], "b": ids["b"]}, 4, "Step times, overlaid"),
        ("history", {"host": mod.HOST, "preset": mod.PRESET, "regime": mod.REGIME}, 2, "Lane history"),
    ]
    with chromium_page(root / "profile") as page:
        for view, params, n_charts, expect in views:
            page.goto(f"{base}/?{urlencode({'view': view, **params})}")
            wait_for_view(page, n_charts)
            assert expect in page.inner_text("body"), view
            page.screenshot(path=str(shots / f"{view}.png"), full_page=True)

        # the refusal is the page: no chart, the differing field named
        page.goto(f"{base}/?{urlencode({'view': 'compare', 'a': ids['a'], 'b': ids['other']})}")
        page.get_by_text("Refused: not comparable").wait_for(timeout=30_000)
        page.wait_for_timeout(500)
        assert "host_lineage" in page.inner_text("body")
        assert page.locator(CHARTS).count() == 0
        page.screenshot(path=str(shots / "compare_refused.png"), full_page=True)

        # moving through views with the sidebar, as a person does
        page.goto(base + "/")
        wait_for_view(page, 1)
        page.locator('[data-testid="stSidebar"]').get_by_text("Receipt", exact=True).click()
        page.get_by_text("Steady-state window").wait_for(timeout=30_000)
        page.locator('[data-testid="stSidebar"]').get_by_text("Anatomy", exact=True).click()
        wait_for_view(page, 4)
        assert "view=anatomy" in page.url


def test_links_filters_and_sources_in_chromium(dashboard):
    """The dashboard as a person meets it in a browser: a filtered lane view survives a reload and
    is a link; a stale link says so; compare overlays the two runs; the anatomy names its source export and
    its top kernels; a receipt compared with itself is called out; no deploy menu."""
    base, ids, root = dashboard
    mod = dashboard_store
    with chromium_page(root / "profile-links") as page:
        page.goto(f"{base}/?{urlencode({'view': 'lanes', 'host': mod.OTHER_HOST})}")
        wait_for_view(page, 1)
        assert page.get_by_text(mod.OTHER_HOST).count() >= 1
        page.reload()
        wait_for_view(page, 1)
        assert f"host={mod.OTHER_HOST}" in page.url  # still filtered after a reload: the URL holds the filter
        metrics = page.locator('[data-testid="stMetricValue"]').all_inner_texts()
        assert metrics[0] == "1", metrics  # one receipt on the other host

        page.goto(f"{base}/?{urlencode({'view': 'receipt', 'id': 'deadbeef'})}")
        page.get_by_text("no receipt deadbeef in this store").wait_for(timeout=30_000)

        page.goto(f"{base}/?{urlencode({'view': 'compare', 'a': ids['a'], 'b': ids['a']})}")
        page.get_by_text("A and B are the same receipt").wait_for(timeout=30_000)

        page.goto(f"{base}/?{urlencode({'view': 'anatomy', 'id': ids['a']})}")
        wait_for_view(page, 4)
        page.get_by_text("Open the source export").click()
        page.get_by_text("nsys-ui").wait_for(timeout=10_000)
        assert "mfu_2gpu_before.nsys-rep" in page.inner_text("body")
        assert page.get_by_text("Top kernels per category, steady state").count() == 1
        assert page.locator('[data-testid="stMainMenu"]').count() == 0 or \
            "Deploy" not in page.inner_text('[data-testid="stToolbar"]')


@pytest.fixture(scope="module")
def lane_dashboard(tmp_path_factory):
    """Four real profiled runs of one lane (tests/data/explain) and the run with two planted slow steps
    (tests/data/slow_step), served as a user serves them."""
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            pytest.fail("Debian chromium missing: run .ci/browser_setup.sh")
        pytest.skip("Debian chromium not installed (.ci/browser_setup.sh)")
    from cli_helpers import cli
    from receipts.store import open_store

    root = tmp_path_factory.mktemp("browser_lane")
    db = str(root / "lane.duckdb")
    data = REPO / "tests" / "data"
    runs = [data / "explain" / n for n in ("base_1", "base_2", "base_3", "aa_1")] + [data / "slow_step" / "slowstep_1"]
    assert cli(db, "ingest", *map(str, runs)).exit_code == 0
    # and the two pages whose numbers read wrong before: an MLPerf result, a planted straggler's what-if impact
    mlperf = data / "mlperf" / "v5.1__Dell_1xXE9680x8H200-SXM-141GB_retinanet_result_0.txt"
    assert cli(db, "ingest", str(mlperf), "--run-name", "retinanet", "--host-lineage", "dell-xe9680-h200",
               "--preset", "mlperf_retinanet", "--regime", "ddp/unknown-compile").exit_code == 0
    straggler = data / "gpu" / "straggler"
    assert cli(db, "ingest", str(straggler / "straggler_plant_nsys" / "run.log")).exit_code == 0
    assert cli(db, "ingest", str(straggler / "straggler_plant_nsys.sqlite.gz"), "--attach",
               "straggler_plant_nsys").exit_code == 0
    with open_store(db, read_only=True) as store:
        ids = {n: store.resolve(n) for n in ("base_1", "base_2", "base_3", "aa_1", "slowstep_1", "retinanet",
                                             "straggler_plant_nsys")}
    with serve_dashboard(db, free_port()) as base:
        yield base, ids, root


def test_overlay_of_a_lane_and_drill_down_to_a_steps_kernels_in_chromium(lane_dashboard):
    """Compare with two more runs of the lane overlaid (each in the legend, dots drawn); then the anatomy of the
    run with planted slow steps, opened at its GEMM step from a link, its extra kernel in the table."""
    base, ids, root = lane_dashboard
    shots = DOC_SHOTS if os.environ.get("RECEIPTS_UPDATE_SCREENSHOTS") == "1" else root / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    with chromium_page(root / "profile-lane") as page:
        more = f"{ids['base_3']},{ids['aa_1']}"
        page.goto(f"{base}/?{urlencode({'view': 'compare', 'a': ids['base_1'], 'b': ids['base_2'], 'more': more})}")
        wait_for_view(page, 4)
        page.get_by_text("2 more of the lane").first.wait_for(timeout=30_000)
        body = page.inner_text("body")
        assert "aa_1" in body and "base_3" in body
        page.screenshot(path=str(shots / "compare_overlay.png"), full_page=True)

        page.goto(f"{base}/?{urlencode({'view': 'receipt', 'id': ids['slowstep_1']})}")
        page.get_by_text("Slowest steady steps in the profile").wait_for(timeout=30_000)
        href = page.get_by_role("link", name="step 12", exact=False).first.get_attribute("href")
        assert href is not None and "view=anatomy" in href and "step=12" in href, href
        page.goto(base + "/" + href.split("/")[-1])  # Streamlit opens a markdown link in a new tab: follow it here
        page.get_by_text("Kernels of step 12 on rank").wait_for(timeout=30_000)
        wait_for_view(page, 5)
        assert "view=anatomy" in page.url and "step=12" in page.url
        # the kernel table is a canvas grid (its cells are not page text): the AppTests read its rows. Tables may
        # paint after the charts on a loaded machine: wait for the second one, then count
        page.locator('[data-testid="stDataFrame"]').nth(1).wait_for(timeout=30_000)
        assert page.locator('[data-testid="stDataFrame"]').count() >= 2
        page.get_by_text("Drill into a step").scroll_into_view_if_needed()
        page.screenshot(path=str(shots / "anatomy_drilldown.png"), full_page=True)


def test_an_mlperf_result_and_a_stragglers_impact_read_right_in_chromium(lane_dashboard):
    """An MLPerf result's page in words, never 'None'; a straggler's what-if impact with no arrow (a metric's
    delta arrow pointing up read as good news for time lost)."""
    base, ids, root = lane_dashboard
    with chromium_page(root / "profile-pages") as page:
        page.goto(f"{base}/?{urlencode({'view': 'receipt', 'id': ids['retinanet']})}")
        page.get_by_text("time to train").first.wait_for(timeout=30_000)
        wait_for_view(page, 1)
        body = page.inner_text("body")
        assert "None" not in body, [line for line in body.splitlines() if "None" in line]
        page.goto(f"{base}/?{urlencode({'view': 'stragglers', 'id': ids['straggler_plant_nsys']})}")
        page.get_by_text("what-if impact", exact=True).wait_for(timeout=30_000)  # the label, not the sentence
        wait_for_view(page, 1)
        assert page.locator('[data-testid="stMetricDelta"]').count() == 0
        assert "rank 1" in page.inner_text("body")
