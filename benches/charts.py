#!/usr/bin/env python3
"""Bar charts of tlogd's current benchmark figures, as SVG, from the recorded JSON.

    python3 benches/charts.py           # writes benches/results/charts/*.svg
    python3 benches/charts.py --check   # fails if the committed SVGs differ from the JSON
    python3 benches/charts.py --out DIR # writes the charts somewhere else

Reads benches/results/current.json: its "questions" hold sets of rows (one sitting each,
with date, machine, command and the history section it comes from), its "charts" say
what to draw: which sets, which rows (`where`), the category on the x axis, the series
(one bar per series in each category) and the metric(s). A value is a number, null
(drawn as "n/m": not measured), or [lo, hi] (a range over runs: the bar at its middle,
a whisker from lo to hi, labelled "lo–hi").

Python 3 standard library only (no matplotlib): runs on a fresh Debian with python3.
The output is deterministic, so `--check` can compare bytes.
"""

import argparse
import decimal
import filecmp
import json
import math
import os
import sys
import tempfile
from xml.sax.saxutils import escape

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "results", "current.json")
OUT = os.path.join(HERE, "results", "charts")
ROOT = os.path.dirname(HERE)

SYSTEM_COLOURS = {
    "tlogd": "#d95f02",
    "Go Tessera v1.0.4": "#1f78b4",
    "TesseraCT v0.1.1": "#1b9e77",
}
PALETTE = ["#d95f02", "#1f78b4", "#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#a6761d", "#666666"]
FONT = "font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\""
CHAR_W = 6.2  # rough width of one character at 11 px, for layout only


# ---------------------------------------------------------------- data

def load(path):
    with open(path, encoding="utf-8") as f:
        # Decimals keep the digits as recorded ("8.0" stays "8.0" on the chart).
        doc = json.load(f, parse_float=decimal.Decimal)
    sets = {}
    required = doc.get("_required_row_fields", [])
    problems = []
    for q in doc["questions"]:
        for s in q["sets"]:
            if s["id"] in sets:
                problems.append(f"set id {s['id']} appears twice")
            for key in ("date", "machine", "command", "history"):
                if not s.get(key):
                    problems.append(f"set {s['id']}: no {key}")
            for i, r in enumerate(s["rows"]):
                missing = [k for k in required if k not in r]
                if missing:
                    problems.append(f"set {s['id']} row {i}: missing {', '.join(missing)} (use null)")
            sets[s["id"]] = s
    for c in doc["charts"]:
        for sid in c["sets"]:
            if sid not in sets:
                problems.append(f"chart {c['file']}: no set {sid}")
    if problems:
        raise SystemExit("current.json: " + "; ".join(problems))
    return doc, sets


def label_of(row, fields, s):
    if isinstance(fields, str):
        fields = [fields]
    parts = []
    for f in fields:
        v = s["date"] if f == "@date" else row.get(f)
        if v is not None:
            parts.append(str(v))
    return ", ".join(parts)


def value_of(v):
    """(bar height, lo, hi, is_range) of a value, or None when not measured."""
    if v is None:
        return None
    if isinstance(v, list):
        lo, hi = float(v[0]), float(v[1])
        return ((lo + hi) / 2, lo, hi, True)
    x = float(v)
    return (x, x, x, False)


def fmt(x, how):
    """A number for a label: "int" rounds to a whole number, "1f" to one decimal, "auto"
    keeps the digits the JSON gives; thousands are separated by commas."""
    if how == "int":
        return f"{int(round(float(x))):,}"
    if how == "1f":
        return f"{float(x):,.1f}"
    if isinstance(x, float):
        x = decimal.Decimal(repr(x))
    return f"{x:,}"


def fmt_value(v, how):
    if isinstance(v, list):
        return f"{fmt(v[0], how)}–{fmt(v[1], how)}"
    return fmt(v, how)


def chart_data(spec, sets):
    """Categories in order, series in order, and {(category, series): raw value}."""
    cats, series, cells = [], [], {}
    where = spec.get("where", {})
    metrics = spec["metrics"]
    mlabels = spec.get("metric_labels", metrics)
    for sid in spec["sets"]:
        s = sets[sid]
        for r in s["rows"]:
            if any(r.get(k) != v for k, v in where.items()):
                continue
            cat = label_of(r, spec["category"], s)
            base = label_of(r, spec["series"], s)
            if cat not in cats:
                cats.append(cat)
            for m, ml in zip(metrics, mlabels):
                name = base if len(metrics) == 1 else f"{base} {ml}"
                key = (base, m)
                if key not in [(b, mm) for (b, mm, _) in series]:
                    series.append((base, m, name))
                cells[(cat, base, m)] = r.get(m)
    return cats, series, cells


def colours(series, metrics):
    bases = []
    for b, _, _ in series:
        if b not in bases:
            bases.append(b)
    out = {}
    if len(bases) == 1 and len(metrics) > 1:
        for i, (b, m, _) in enumerate(series):
            out[(b, m)] = PALETTE[metrics.index(m) % len(PALETTE)]
        return out
    used, base_colour = set(), {}
    for b in bases:
        if b in SYSTEM_COLOURS:
            base_colour[b] = SYSTEM_COLOURS[b]
            used.add(SYSTEM_COLOURS[b])
    free = [c for c in PALETTE if c not in used]
    for b in bases:
        if b not in base_colour:
            base_colour[b] = free.pop(0) if free else PALETTE[len(base_colour) % len(PALETTE)]
    for b, m, _ in series:
        c = base_colour[b]
        if len(metrics) > 1:
            # The first metric (p50, say) lighter, the last full strength.
            k = metrics.index(m) / (len(metrics) - 1)
            c = tint(c, 0.55 * (1 - k))
        out[(b, m)] = c
    return out


def tint(hexcolour, amount):
    r, g, b = (int(hexcolour[i:i + 2], 16) for i in (1, 3, 5))
    mix = lambda c: int(round(c + (255 - c) * amount))
    return f"#{mix(r):02x}{mix(g):02x}{mix(b):02x}"


def nice_max(x, ticks=5):
    if x <= 0:
        return 1.0, 0.2
    raw = x / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 2.5, 5, 10):
        step = m * mag
        if step * ticks >= x:
            break
    top = math.ceil(x / step) * step
    return top, step


def tick(t, step):
    if step >= 1:
        return f"{int(round(t)):,}"
    return f"{t:.2f}".rstrip("0").rstrip(".")


def wrap(text, width):
    words, lines, cur = text.split(" "), [], ""
    for w in words:
        if cur and len(cur) + 1 + len(w) > width:
            lines.append(cur)
            cur = w
        else:
            cur = f"{cur} {w}" if cur else w
    if cur:
        lines.append(cur)
    return lines


def num(x):
    """Coordinates with one decimal, so the output is stable."""
    s = f"{x:.1f}"
    return s[:-2] if s.endswith(".0") else s


# ---------------------------------------------------------------- drawing

def svg_open(w, h, title):
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" {FONT} font-size="11">',
        f"<title>{escape(title)}</title>",
        f'<rect width="{w}" height="{h}" fill="#ffffff"/>',
    ]


def text(x, y, s, size=11, anchor="start", weight=None, fill="#222222", rotate=None):
    extra = f' font-weight="{weight}"' if weight else ""
    if rotate is not None:
        extra += f' transform="rotate({rotate} {num(x)} {num(y)})"'
    return (f'<text x="{num(x)}" y="{num(y)}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}"{extra}>{escape(s)}</text>')


def legend(parts, series, col, x0, y, max_w):
    x = x0
    for b, m, name in series:
        w = 14 + 6 + len(name) * CHAR_W + 18
        if x + w > x0 + max_w and x > x0:
            x, y = x0, y + 18
        parts.append(f'<rect x="{num(x)}" y="{num(y - 10)}" width="12" height="12" fill="{col[(b, m)]}"/>')
        parts.append(text(x + 17, y, name))
        x += w
    return y


def draw_vertical(spec, cats, series, cells, col):
    how = spec.get("format", "auto")
    width = 860
    left, right = 78, 24
    plot_w = width - left - right
    group_w = plot_w / max(1, len(cats))
    per_cat = {c: [s for s in series if (c, s[0], s[1]) in cells] for c in cats}
    nmax = max(len(v) for v in per_cat.values())
    bar_w = min(46.0, group_w * 0.82 / max(1, nmax))
    labels = {c: wrap(c, max(8, int(group_w / CHAR_W) - 1)) for c in cats}
    label_lines = max(len(v) for v in labels.values())
    # Value labels: horizontal when they fit over a bar, else turned upright.
    all_vals = [cells[k] for k in cells if cells[k] is not None]
    longest = max((len(fmt_value(v, how)) for v in all_vals), default=3)
    upright = longest * (CHAR_W - 0.6) > bar_w + 6
    headroom = (longest * CHAR_W + 8) if upright else 16

    # Legend height, measured by a dry run.
    probe = []
    leg_bottom = legend(probe, series, col, left, 0, plot_w)
    title_h = 62
    plot_top = title_h + leg_bottom + 22
    plot_h = 300
    height = int(plot_top + plot_h + 16 + label_lines * 13 + 30)

    vmax = 0.0
    for v in all_vals:
        _, _, hi, _ = value_of(v)
        vmax = max(vmax, hi)
    top, step = nice_max(vmax * plot_h / (plot_h - headroom))
    y0 = plot_top + plot_h
    sy = lambda v: y0 - v / top * plot_h

    p = svg_open(width, height, spec["title"])
    p.append(text(left, 24, spec["title"], size=15, weight="bold"))
    if spec.get("subtitle"):
        p.append(text(left, 42, spec["subtitle"], size=11, fill="#555555"))
    legend(p, series, col, left, title_h + 6, plot_w)

    # Grid and y axis.
    t = 0.0
    while t <= top + step / 2:
        y = sy(t)
        p.append(f'<line x1="{left}" y1="{num(y)}" x2="{left + plot_w}" y2="{num(y)}" stroke="#e4e4e4"/>')
        p.append(text(left - 6, y + 4, tick(t, step), size=10, anchor="end", fill="#555555"))
        t += step
    p.append(f'<line x1="{left}" y1="{plot_top}" x2="{left}" y2="{num(y0)}" stroke="#444444"/>')
    p.append(f'<line x1="{left}" y1="{num(y0)}" x2="{left + plot_w}" y2="{num(y0)}" stroke="#444444"/>')
    p.append(text(18, plot_top + plot_h / 2, spec["y_label"], size=11, anchor="middle", rotate=-90))

    for ci, c in enumerate(cats):
        present = per_cat[c]
        gx = left + ci * group_w
        x = gx + (group_w - bar_w * len(present)) / 2
        for b, m, name in present:
            raw = cells[(c, b, m)]
            val = value_of(raw)
            if val is None:
                p.append(text(x + bar_w / 2, y0 - 4, "n/m", size=9, anchor="middle", fill="#888888"))
                x += bar_w
                continue
            h, lo, hi, is_range = val
            yb = sy(h)
            p.append(f'<rect x="{num(x + 1)}" y="{num(yb)}" width="{num(bar_w - 2)}" height="{num(y0 - yb)}" fill="{col[(b, m)]}">'
                     f"<title>{escape(name)}: {escape(fmt_value(raw, how))}</title></rect>")
            ytop = yb
            if is_range:
                xm = x + bar_w / 2
                p.append(f'<line x1="{num(xm)}" y1="{num(sy(lo))}" x2="{num(xm)}" y2="{num(sy(hi))}" stroke="#222222"/>')
                for yy in (sy(lo), sy(hi)):
                    p.append(f'<line x1="{num(xm - 4)}" y1="{num(yy)}" x2="{num(xm + 4)}" y2="{num(yy)}" stroke="#222222"/>')
                ytop = sy(hi)
            label = fmt_value(raw, how)
            if upright:
                p.append(text(x + bar_w / 2 + 4, ytop - 4, label, size=10, rotate=-90))
            else:
                p.append(text(x + bar_w / 2, ytop - 4, label, size=10, anchor="middle"))
            x += bar_w
        for li, line in enumerate(labels[c]):
            p.append(text(gx + group_w / 2, y0 + 16 + li * 13, line, size=11, anchor="middle"))
    p.append(text(left, height - 8, "source: benches/results/current.json (" + ", ".join(spec["sets"]) + ")",
                  size=9, fill="#888888"))
    p.append("</svg>")
    return "\n".join(p) + "\n"


def draw_horizontal(spec, cats, series, cells, col):
    how = spec.get("format", "auto")
    width = 860
    label_w = max(len(c) for c in cats) * CHAR_W + 16
    left = 12 + label_w
    right = 90
    plot_w = width - left - right
    per_cat = {c: [s for s in series if (c, s[0], s[1]) in cells] for c in cats}
    bar_h = 16
    group_h = bar_h * max(len(v) for v in per_cat.values()) + 8
    probe = []
    leg_bottom = legend(probe, series, col, left, 0, plot_w) if len(series) > 1 else -18
    plot_top = 62 + leg_bottom + 22
    plot_h = group_h * len(cats)
    height = int(plot_top + plot_h + 46)
    vmax = max((value_of(v)[2] for v in cells.values() if v is not None), default=1)
    top, step = nice_max(vmax)
    sx = lambda v: left + v / top * plot_w

    p = svg_open(width, height, spec["title"])
    p.append(text(12, 24, spec["title"], size=15, weight="bold"))
    if spec.get("subtitle"):
        p.append(text(12, 42, spec["subtitle"], size=11, fill="#555555"))
    if len(series) > 1:
        legend(p, series, col, left, 68, plot_w)
    t = 0.0
    while t <= top + step / 2:
        x = sx(t)
        p.append(f'<line x1="{num(x)}" y1="{num(plot_top)}" x2="{num(x)}" y2="{num(plot_top + plot_h)}" stroke="#e4e4e4"/>')
        p.append(text(x, plot_top + plot_h + 14, tick(t, step), size=10, anchor="middle", fill="#555555"))
        t += step
    p.append(f'<line x1="{left}" y1="{num(plot_top)}" x2="{left}" y2="{num(plot_top + plot_h)}" stroke="#444444"/>')
    p.append(text(left + plot_w / 2, plot_top + plot_h + 30, spec["y_label"], size=11, anchor="middle"))
    for ci, c in enumerate(cats):
        y = plot_top + ci * group_h + 4
        p.append(text(left - 8, y + group_h / 2, c, size=11, anchor="end"))
        for b, m, name in per_cat[c]:
            raw = cells[(c, b, m)]
            val = value_of(raw)
            if val is None:
                p.append(text(left + 4, y + bar_h - 4, "n/m", size=9, fill="#888888"))
            else:
                w = sx(val[0]) - left
                p.append(f'<rect x="{left}" y="{num(y)}" width="{num(w)}" height="{bar_h - 2}" fill="{col[(b, m)]}">'
                         f"<title>{escape(name)}: {escape(fmt_value(raw, how))}</title></rect>")
                p.append(text(left + w + 4, y + bar_h - 5, fmt_value(raw, how), size=10))
            y += bar_h
    p.append(text(12, height - 8, "source: benches/results/current.json (" + ", ".join(spec["sets"]) + ")",
                  size=9, fill="#888888"))
    p.append("</svg>")
    return "\n".join(p) + "\n"


def render(spec, sets):
    cats, series, cells = chart_data(spec, sets)
    if not cats:
        raise SystemExit(f"chart {spec['file']}: no rows")
    col = colours(series, spec["metrics"])
    if spec.get("orientation") == "horizontal":
        return draw_horizontal(spec, cats, series, cells, col)
    return draw_vertical(spec, cats, series, cells, col)


def write_all(doc, sets, out):
    os.makedirs(out, exist_ok=True)
    names = []
    for spec in doc["charts"]:
        svg = render(spec, sets)
        with open(os.path.join(out, spec["file"]), "w", encoding="utf-8", newline="\n") as f:
            f.write(svg)
        names.append(spec["file"])
    return names


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true",
                    help="regenerate into a temporary directory and fail if the committed SVGs differ")
    ap.add_argument("--data", default=DATA, help="the JSON (default: benches/results/current.json)")
    ap.add_argument("--out", default=OUT, help="where the SVGs go (default: benches/results/charts)")
    args = ap.parse_args()
    doc, sets = load(args.data)
    if not args.check:
        names = write_all(doc, sets, args.out)
        print(f"wrote {len(names)} charts to {os.path.relpath(args.out, ROOT)}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        names = write_all(doc, sets, tmp)
        bad = []
        for n in names:
            committed = os.path.join(args.out, n)
            if not os.path.exists(committed):
                bad.append(f"{n}: missing")
            elif not filecmp.cmp(committed, os.path.join(tmp, n), shallow=False):
                bad.append(f"{n}: differs from what the JSON gives")
        if os.path.isdir(args.out):
            for n in sorted(os.listdir(args.out)):
                if n.endswith(".svg") and n not in names:
                    bad.append(f"{n}: no chart in the JSON draws it")
    if bad:
        print("charts out of date (run python3 benches/charts.py):", file=sys.stderr)
        for b in bad:
            print("  " + b, file=sys.stderr)
        return 1
    print(f"{len(names)} charts match {os.path.relpath(args.data, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
