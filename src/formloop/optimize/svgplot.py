"""The fast_p curve as a hand-written SVG (no plotting library): fast_p(p) for p from 0 to past the
largest speedup, one step line per labelled set of speedups, with the report's points (p = 0, 1,
1.5, 2) marked and their values written beside them."""
from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from xml.sax.saxutils import escape

from formloop.campaign.metrics import fast_p

W, H, LEFT, BOTTOM, TOP, RIGHT = 640, 400, 60, 50, 30, 190
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def curve(speedups: Mapping[str, float | None], top: float) -> list[tuple[float, float]]:
    """The step curve's corners: (p, fast_p(p)) at 0, at each distinct speedup, and at `top`."""
    cuts = sorted({0.0, top, *[s for s in speedups.values() if s is not None and 0 <= s <= top]})
    out: list[tuple[float, float]] = []
    for p in cuts:
        # fast_p counts speedups strictly above p: the value just left of a cut is the one at the previous cut
        if out:
            out.append((p, out[-1][1]))
        out.append((p, fast_p(speedups, p)))
    return out


def write_svg(curves: Mapping[str, Mapping[str, float | None]], path: str | Path, *, title: str,
              marks: tuple[float, ...] = (0.0, 1.0, 1.5, 2.0)) -> Path:
    top = max([s for sp in curves.values() for s in sp.values() if s is not None] + [2.0]) * 1.05
    pw, ph = W - LEFT - RIGHT, H - TOP - BOTTOM

    def xy(p: float, f: float) -> tuple[float, float]:
        return LEFT + pw * p / top, TOP + ph * (1 - f)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" '
             f'font-size="11">', f'<rect width="{W}" height="{H}" fill="white"/>',
             f'<text x="{LEFT}" y="18" font-size="13">{escape(title)}</text>',
             f'<line x1="{LEFT}" y1="{TOP + ph}" x2="{LEFT + pw}" y2="{TOP + ph}" stroke="black"/>',
             f'<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{TOP + ph}" stroke="black"/>']
    for f in (0.0, 0.25, 0.5, 0.75, 1.0):
        x, y = xy(0, f)
        parts.append(f'<text x="{x - 6}" y="{y + 4}" text-anchor="end">{f:.0%}</text>')
    step = 0.5 if top <= 4 else float(max(1, round(top / 8)))
    p = 0.0
    while p <= top:
        x, y = xy(p, 0)
        parts.append(f'<text x="{x}" y="{y + 16}" text-anchor="middle">{p:g}</text>')
        p += step
    x1, _ = xy(1.0, 0)
    parts.append(f'<line x1="{x1}" y1="{TOP}" x2="{x1}" y2="{TOP + ph}" stroke="grey" stroke-dasharray="3,3"/>')
    parts.append(f'<text x="{LEFT + pw / 2}" y="{H - 12}" text-anchor="middle">speedup threshold p '
                 f'(x baseline)</text>')
    for i, (label, sp) in enumerate(curves.items()):
        color = COLORS[i % len(COLORS)]
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in (xy(p, f) for p, f in curve(sp, top)))
        parts.append(f'<polyline class="fast-p" data-label="{escape(label)}" fill="none" stroke="{color}" '
                     f'stroke-width="2" points="{pts}"/>')
        for m in marks:
            x, y = xy(m, fast_p(sp, m))
            parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{color}" data-p="{m:g}" '
                         f'data-fast-p="{fast_p(sp, m):.6f}"/>')
        ly = TOP + 32 * i + 8
        parts.append(f'<line x1="{W - RIGHT + 12}" y1="{ly}" x2="{W - RIGHT + 32}" y2="{ly}" stroke="{color}" '
                     f'stroke-width="2"/>')
        vals = ", ".join(f"{fast_p(sp, m):.0%}" for m in marks)
        parts.append(f'<text x="{W - RIGHT + 36}" y="{ly + 4}">{escape(label)}</text>')
        parts.append(f'<text x="{W - RIGHT + 36}" y="{ly + 18}" font-size="9">fast_p at '
                     f'{"/".join(f"{m:g}" for m in marks)}: {vals}</text>')
    parts.append("</svg>")
    target = Path(path)
    target.write_text("\n".join(parts) + "\n")
    return target
