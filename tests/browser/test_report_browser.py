"""The reports as a person sees them: opened from disk in headless Chromium, no server.

Each page must render every figure with points, log no console error, ask for nothing but its
own file, and respond to the mouse (hover text, selecting a Pareto design, sorting the table).
Screenshots go to ``out/screenshots/`` (git-ignored) for a human to look at.

Needs Debian's ``chromium`` (``apt-get install -y chromium``); skipped with the reason
otherwise. Driven over the DevTools protocol by ``tests/browser/cdp.py`` (standard library).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.browser.cdp import Browser, CDPError, find_chromium

pytestmark = pytest.mark.slow

if find_chromium() is None:
    pytest.skip("headless Chromium is not installed (Debian: apt-get install -y chromium)",
                allow_module_level=True)

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "out" / "screenshots"
XSS = "<script>alert(1)</script>"
XSS_PARAM = '"><img src=x onerror=alert(2)><b>b</b>'
DESIGN_FIGURES = ("fig-by_kind", "fig-by_component", "fig-timeline", "fig-roofline")
STUDY_FIGURES = ("fig-pareto2d", "fig-pareto3d", "fig-parcoords", "fig-importances", "fig-history",
                 "fig-detail-by_kind", "fig-detail-by_component", "fig-detail-timeline",
                 "fig-detail-roofline")
SERVING_FIGURES = ("fig-latency_cdf", "fig-occupancy", "fig-rate_sweep")
#: Records alert() calls instead of showing them: an injected script would leave a trace here.
RECORD_ALERTS = "window.__alerts = []; window.alert = function (m) { window.__alerts.push(String(m)); };"


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
    import optuna
    from dse import api
    from dse.report import write_design_report, write_serving_report, write_study_report
    from tests.browser.fixtures import make_study
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    d = tmp_path_factory.mktemp("reports")
    result = api.simulate("gpt2", "npu", phase="decode", batch=8, context=512)
    study = make_study(n_trials=40, seed=0)
    hostile = make_study(n_trials=6, seed=3, name=XSS, param_prefix=XSS_PARAM + ".")
    from tests.test_serving_report import KW
    sweep = api.serve_sweep("llama2-7b", [100, 400, 1600], **KW)
    return {"design": write_design_report(result, d / "design.html"),
            "study": write_study_report(study, d / "study.html", max_details=5),
            "hostile": write_study_report(hostile, d / "hostile.html", max_details=1),
            "study_obj": study,
            "serving": write_serving_report(sweep.results[-1], d / "serving.html", sweep)}


@pytest.fixture(scope="module")
def browser():
    with Browser() as b:
        yield b


def open_report(browser, path: Path):
    page = browser.new_page()
    page.add_init_script(RECORD_ALERTS)
    page.goto(path.resolve().as_uri())
    page.wait_for("window.__report && (window.__report.ready || window.__report.error)", timeout_s=60)
    assert page.evaluate("window.__report.error || null") is None
    page.evaluate("window.__report.drawAll()", await_promise=True)
    page.wait_for("window.__report.complete", timeout_s=60)
    return page


def check_page(page, path: Path, figures) -> dict:
    status = page.evaluate("window.__report")
    for div in figures:
        assert div in status["figures"], f"{div} did not render"
        assert status["figures"][div]["points"] > 0, f"{div} has no points"
        # Plotly really drew it: the div holds its SVG (and its data)
        assert page.evaluate(f"document.getElementById('{div}').querySelector('.main-svg') !== null")
    assert page.errors() == []
    assert page.requests == [path.resolve().as_uri()]  # offline: nothing but the file itself
    assert page.evaluate("window.__alerts.length") == 0
    return status


def shoot(page, name: str, figures=()) -> None:
    page.screenshot(SHOTS / f"{name}.png")
    for div in figures:
        page.screenshot(SHOTS / f"{name}-{div}.png", selector=f"#{div}")


def test_design_report_renders_every_figure(browser, reports):
    page = open_report(browser, reports["design"])
    status = check_page(page, reports["design"], DESIGN_FIGURES)
    assert status["figures"]["fig-timeline"]["points"] > 100  # one bar per op of GPT-2 decode
    shoot(page, "design", DESIGN_FIGURES)
    page.close()


def test_serving_report_renders_every_figure(browser, reports):
    page = open_report(browser, reports["serving"])
    status = check_page(page, reports["serving"], SERVING_FIGURES)
    assert status["figures"]["fig-latency_cdf"]["points"] > 3 * 60   # every request's CDF
    shoot(page, "serving", SERVING_FIGURES)
    page.close()


def _point_position(page, div: str, trace_name_start: str) -> dict:
    """Viewport position of a point of the trace whose name starts with the text, among the
    designs with details (the design selector's options): the one farthest from every other
    plotted point, the figure zoomed around it (as a user would) until no other point lies
    within 12 px, so the hover cannot land on a neighbour."""
    return page.evaluate("""(async () => {
      const gd = document.getElementById(%s);
      gd.scrollIntoView({block: "center"});
      const i = gd.data.findIndex(t => (t.name || "").startsWith(%s));
      const t = gd.data[i];
      const allowed = Array.from(document.querySelectorAll("#design-select option"))
                           .map(o => o.value);
      const place = () => {
        const L = gd._fullLayout, box = gd.getBoundingClientRect();
        const px = (u, j) => [box.left + L._size.l + L.xaxis.l2p(L.xaxis.d2l(u.x[j])),
                              box.top + L._size.t + L.yaxis.l2p(L.yaxis.d2l(u.y[j]))];
        const all = [];
        gd.data.forEach((u, k) => (u.x || []).forEach((_, m) => all.push([k, m, px(u, m)])));
        let best = -1, bestGap = -1;
        t.x.forEach((_, j) => {
          if (!allowed.includes(String(t.customdata[j]))) return;
          const [x, y] = px(t, j);
          let gap = Infinity;
          for (const [k, m, [u, v]] of all)
            if (!(k === i && m === j)) gap = Math.min(gap, Math.hypot(u - x, v - y));
          if (gap > bestGap) { bestGap = gap; best = j; }
        });
        const [x, y] = px(t, best);
        return {trace: i, point: best, trial: t.customdata[best], x: x, y: y, gap: bestGap};
      };
      let pos = place();
      for (let n = 0; n < 6 && pos.gap < 12; n++) {   // zoom 4x around the point
        const L = gd._fullLayout;
        const win = (ax, d) => { const c = ax.d2l(d), r = ax.range.map(Number);
                                 const w = (r[1] - r[0]) / 8; return [c - w, c + w]; };
        await Plotly.relayout(gd, {"xaxis.range": win(L.xaxis, t.x[pos.point]),
                                   "yaxis.range": win(L.yaxis, t.y[pos.point])});
        pos = place();
      }
      return pos;
    })()""" % (json.dumps(div), json.dumps(trace_name_start)), await_promise=True)


def test_study_report_renders_hovers_selects_and_sorts(browser, reports):
    from dse.report.study_data import read_study
    data = read_study(reports["study_obj"])
    page = open_report(browser, reports["study"])
    status = check_page(page, reports["study"], STUDY_FIGURES)
    assert status["figures"]["fig-pareto2d"]["points"] == len(data.plotted)
    pareto = [str(t.number) for t in data.pareto]
    assert status["selected"] == pareto[0]

    # hover a Pareto point: its text lists every parameter and metric
    pos = _point_position(page, "fig-pareto2d", "Pareto")
    assert pos["gap"] >= 12, pos   # pixels to the nearest other point
    page.mouse_move(pos["x"], pos["y"])
    hover = page.wait_for("(document.querySelector('#fig-pareto2d .hoverlayer .hovertext') || {}).textContent")
    assert f"trial {pos['trial']}" in hover
    for key in data.param_keys + ["latency_s", "energy_j", "area_mm2", "avg_power_w"]:
        assert key in hover, f"{key} missing from the hover text"
    page.screenshot(SHOTS / "study-hover.png", selector="#fig-pareto2d")

    # click it: the detail view switches to that design
    selected = f"window.__report.selected === '{pos['trial']}'"
    for attempt in range(3):   # a click landing while the page is still busy is retried
        page.click(pos["x"], pos["y"])
        try:
            page.wait_for(selected, timeout_s=10.0)
            break
        except CDPError:
            if attempt == 2:
                raise
    page.wait_for(f"window.__report.figures['fig-detail-timeline'].name === 't{pos['trial']}w0_timeline'")
    assert page.evaluate("document.getElementById('detail-title').textContent").startswith(
        f"trial {pos['trial']}")

    # the table: one row per Pareto design; sorting by latency orders the rows
    col = 1 + data.metric_keys.index("latency_s")
    page.evaluate(f"document.querySelectorAll('#pareto-table th')[{col}].click()")
    order = page.evaluate("Array.from(document.querySelectorAll('#pareto-table tbody tr')).map(r => r.dataset.trial)")
    by_latency = sorted(data.pareto, key=lambda t: (t.values["latency_s"], t.number))
    assert order == [str(t.number) for t in by_latency]
    page.evaluate(f"document.querySelectorAll('#pareto-table th')[{col}].click()")
    order_desc = page.evaluate("Array.from(document.querySelectorAll('#pareto-table tbody tr')).map(r => r.dataset.trial)")
    assert order_desc == order[::-1]
    # clicking a row selects its design
    other = next(n for n in order_desc if n in pareto[:5] and n != pos["trial"])
    page.evaluate(f"document.querySelector('#pareto-table tbody tr[data-trial=\"{other}\"]').click()")
    page.wait_for(f"window.__report.figures['fig-detail-roofline'].name === 't{other}w0_roofline'")
    assert page.errors() == []
    shoot(page, "study", STUDY_FIGURES + ("pareto-table",))
    page.close()


def test_hostile_names_show_as_text_and_run_nothing(browser, reports):
    page = open_report(browser, reports["hostile"])
    check_page(page, reports["hostile"], ("fig-pareto2d", "fig-parcoords"))
    assert page.evaluate("document.querySelector('h1').textContent") == f"Study: {XSS}"
    assert page.evaluate("document.title") == f"Study: {XSS}"
    assert page.evaluate("document.querySelectorAll('img').length") == 0
    assert page.evaluate("document.querySelectorAll('script').length") == 3
    # the parameter name is shown, literally, as an axis title of the parallel coordinates
    labels = page.evaluate("Array.from(document.querySelectorAll('#fig-parcoords .annotation-text')).map(e => e.textContent).join(' ')")
    assert "onerror=alert(2)><b>b</b>" in labels  # tags shown as text, not rendered
    shoot(page, "hostile", ("fig-parcoords",))
    page.close()
