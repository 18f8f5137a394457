"""One self-contained HTML page: plotly.js inlined once, every figure and datum as one JSON blob.

Safety: user strings (study, model, parameter names...) reach the page three ways and each is
escaped:

* HTML text and attributes: :func:`el` escapes every ``str`` child and attribute value; only
  :class:`Markup` (built by :func:`el` itself) passes through.
* Plotly text (titles, tick labels, hover text, legend names): Plotly renders a subset of HTML,
  so builders pass user strings through :func:`plot_text` (HTML-escaped; Plotly shows the
  entities as the literal characters).
* The JSON blob inside ``<script type="application/json">``: :func:`script_json` writes ``<``,
  ``>``, ``&``, U+2028 and U+2029 as ``\\u`` escapes, so no string can close the script
  element or open a comment (``</script>``, ``<!--``). The page's own script builds DOM text
  with ``textContent`` only, never ``innerHTML``.

A Content-Security-Policy with ``connect-src 'none'`` and no remote sources makes the offline
promise checkable: the page cannot fetch anything.
"""

from __future__ import annotations

import hashlib
import html as _html
import json
import math
from pathlib import Path
from typing import Any, Iterable, Mapping

from dse.report.assets import REPORT_CSS, REPORT_JS

#: Significant digits kept for floats in the embedded JSON [E: 6 digits are finer than any
#: pixel of a plot or digit a hover label prints (4), and keep 1,000-trial reports small].
FLOAT_DIGITS = 6

#: A list in a trace is shared between figures (stored once) when it has at least this many
#: items and occurs more than once [E: below this the reference costs about as much as the copy].
SHARE_MIN_ITEMS = 16

#: The page's Content-Security-Policy: inline script and style only ('unsafe-eval' because
#: plotly.js's WebGL traces compile shader wrappers with ``Function``), no network at all.
CSP = ("default-src 'none'; script-src 'unsafe-inline' 'unsafe-eval'; "
       "style-src 'unsafe-inline'; img-src data: blob:; font-src data:; worker-src blob:; "
       "connect-src 'none'; base-uri 'none'; form-action 'none'")


class Markup(str):
    """HTML that is already safe (made by :func:`el`); inserted without escaping."""


def escape(value: object) -> str:
    """HTML-escape any value's text (quotes too, so it is safe in attributes)."""
    return _html.escape(str(value), quote=True)


def plot_text(value: object) -> str:
    """A user string made safe for Plotly's HTML-like text rendering (shown literally)."""
    return _html.escape(str(value), quote=False)


def el(tag: str, *children: object, **attrs: object) -> Markup:
    """``<tag attrs>children</tag>`` with every str child and attribute value escaped.

    Attribute names: trailing ``_`` is dropped (``class_``), other ``_`` become ``-``
    (``data_figure``). ``None`` / ``False`` attributes are left out; ``True`` is a bare flag.
    """
    parts = [f"<{tag}"]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        parts.append(f" {name}" if value is True else f' {name}="{escape(value)}"')
    parts.append(">")
    for child in _flatten(children):
        parts.append(child if isinstance(child, Markup) else escape(child))
    if tag not in ("meta", "br", "hr", "input", "img", "link"):
        parts.append(f"</{tag}>")
    return Markup("".join(parts))


def _flatten(children: Iterable[object]) -> Iterable[object]:
    for c in children:
        if c is None:
            continue
        if isinstance(c, (list, tuple)):
            yield from _flatten(c)
        else:
            yield c


def compact(obj: Any) -> Any:
    """JSON-ready copy: numpy arrays and tuples to lists, floats to ``FLOAT_DIGITS``
    significant digits, NaN and infinities to ``None`` (JSON has neither)."""
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return float(f"{obj:.{FLOAT_DIGITS}g}")
    if isinstance(obj, Mapping):
        return {str(k): compact(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [compact(v) for v in obj]
    tolist = getattr(obj, "tolist", None)  # numpy arrays and scalars
    if tolist is not None:
        return compact(tolist())
    return str(obj)


def script_json(obj: Any) -> str:
    """JSON text safe inside a ``<script>`` element (see the module docstring)."""
    text = json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


def figure_json(fig: Any) -> dict:
    """A Plotly figure (``go.Figure`` or dict) as ``{"data": [...], "layout": {...}}``, with
    the theme template dropped (the page applies one shared base layout)."""
    d = fig.to_plotly_json() if hasattr(fig, "to_plotly_json") else dict(fig)
    layout = dict(d.get("layout") or {})
    layout.pop("template", None)
    return compact({"data": list(d.get("data") or []), "layout": layout})


def share_arrays(figures: dict[str, dict]) -> tuple[dict[str, dict], list[list]]:
    """Store each long list that occurs in more than one trace once.

    Returns the figures with such lists replaced by ``{"$shared": i}`` and the shared lists;
    the page's script puts them back before plotting. Only top-level trace properties are
    considered (hover text, customdata, x/y arrays).
    """
    seen: dict[str, int] = {}
    for fig in figures.values():
        for trace in fig["data"]:
            for value in trace.values():
                if isinstance(value, list) and len(value) >= SHARE_MIN_ITEMS:
                    key = _digest(value)
                    seen[key] = seen.get(key, 0) + 1
    index: dict[str, int] = {}
    shared: list[list] = []
    out: dict[str, dict] = {}
    for name, fig in figures.items():
        traces = []
        for trace in fig["data"]:
            t = {}
            for k, value in trace.items():
                if isinstance(value, list) and len(value) >= SHARE_MIN_ITEMS:
                    key = _digest(value)
                    if seen[key] > 1:
                        if key not in index:
                            index[key] = len(shared)
                            shared.append(value)
                        value = {"$shared": index[key]}
                t[k] = value
            traces.append(t)
        out[name] = {"data": traces, "layout": fig["layout"]}
    return out, shared


def _digest(value: list) -> str:
    return hashlib.sha1(json.dumps(value, separators=(",", ":")).encode()).hexdigest()


def plotly_js() -> str:
    """The plotly.js bundle shipped with the installed ``plotly`` package (no CDN)."""
    from plotly.offline import get_plotlyjs
    return get_plotlyjs()


def render_page(title: str, body: Markup, figures: Mapping[str, Any],
                data: Mapping[str, Any] | None = None) -> str:
    """The whole page: ``body`` (built with :func:`el`), the figures (name -> figure), and any
    extra JSON the page's script reads (``data``)."""
    figs = {name: figure_json(f) if not _is_plain(f) else compact(f) for name, f in figures.items()}
    figs, shared = share_arrays(figs)
    blob = {"figures": figs, "shared": shared, **compact(dict(data or {}))}
    head = Markup(
        '<meta charset="utf-8">'
        + str(el("meta", http_equiv="Content-Security-Policy", content=CSP))
        + '<meta name="viewport" content="width=device-width, initial-scale=1">'
        + str(el("title", title))
        + str(el("style", Markup(REPORT_CSS))))
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head>" + head + "</head><body>" + body
            + '<script id="report-data" type="application/json">' + script_json(blob)
            + "</script>\n<script>" + _safe_script(plotly_js()) + "</script>\n<script>"
            + REPORT_JS + "</script></body></html>\n")


def _is_plain(fig: Any) -> bool:
    return isinstance(fig, Mapping) and set(fig) <= {"data", "layout"} and not hasattr(fig, "to_plotly_json")


def _safe_script(js: str) -> str:
    """A trusted script's text with any ``</script`` (in a string literal) split so the HTML
    parser does not end the element early."""
    return js.replace("</script", "<\\/script").replace("<!--", "<\\!--")


def write_page(path: str | Path, text: str) -> Path:
    """Write the page (UTF-8), making parent folders; atomically (a temporary file renamed
    over it), so a kill mid-write never leaves a truncated report."""
    from dse.files import atomic_write_text
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, text)
    return path
