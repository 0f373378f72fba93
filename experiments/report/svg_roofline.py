"""A roofline as inline SVG: every point named on hover by an SVG <title>, with no script and
nothing loaded from the network, so the report stays one file that can be mailed.

Matplotlib draws the report's other figures; it cannot attach a tooltip to each point of a
scatter, which is what a reader of "where does my kernel land" needs, hence this small writer.
"""

from __future__ import annotations

import math
from html import escape

from experiments.analysis.units import si

W, H, PAD_L, PAD_B, PAD_T, PAD_R = 740, 420, 90, 45, 15, 150  # PAD_L: "100 TFLOP/s" fits
# workloads, their aten ops at counted intensity, and the ops again at FLOPs / measured bytes of
# each memory level (ncu): the hierarchical roofline
COLORS = {"workload": "#1f77b4", "kernel": "#ff7f0e", "predicted": "#999999", "DRAM": "#2ca02c",
          "L2": "#9467bd", "L1": "#8c564b"}


def _ticks(lo: float, hi: float) -> list[float]:
    return [10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)]


def draw(title: str, roofs: list[tuple[str, float]], peaks: list[tuple[str, float]],
         points: list[dict]) -> str:
    """roofs: (label, bytes/s) memory levels; peaks: (label, FLOP/s) compute ceilings; points:
    dicts with name, intensity, flop_per_s, kind (workload | kernel) and text (the tooltip)."""
    pts = [p for p in points if p["intensity"] > 0 and p["flop_per_s"] > 0]
    xs = [p["intensity"] for p in pts] + [1e-2, 1e3]
    top = max([v for _, v in peaks] + [p["flop_per_s"] for p in pts] + [1.0])
    x_lo, x_hi = min(xs) / 2, max(xs) * 2
    y_hi = top * 2
    y_lo = min([p["flop_per_s"] for p in pts] + [top / 1e5]) / 2

    def X(v):
        return PAD_L + (math.log10(v) - math.log10(x_lo)) / (
            math.log10(x_hi) - math.log10(x_lo)) * (W - PAD_L - PAD_R)

    def Y(v):
        return H - PAD_B - (math.log10(v) - math.log10(y_lo)) / (
            math.log10(y_hi) - math.log10(y_lo)) * (H - PAD_B - PAD_T)

    # width: its natural size on a wide screen (not blown up), shrunk to fit a narrow one
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" '
           f'role="img" style="max-width:100%;height:auto;font:12px sans-serif">',
           f"<title>{escape(title)}</title>",
           f'<rect x="{PAD_L}" y="{PAD_T}" width="{W - PAD_L - PAD_R}" '
           f'height="{H - PAD_B - PAD_T}" fill="none" stroke="#ccc"/>']
    for v in _ticks(x_lo, x_hi):
        if x_lo <= v <= x_hi:
            out.append(f'<line x1="{X(v):.1f}" y1="{H - PAD_B}" x2="{X(v):.1f}" y2="{PAD_T}" '
                       f'stroke="#eee"/><text x="{X(v):.1f}" y="{H - PAD_B + 14}" '
                       f'text-anchor="middle">{v:g}</text>')
    for v in _ticks(y_lo, y_hi):
        if y_lo <= v <= y_hi:
            out.append(f'<line x1="{PAD_L}" y1="{Y(v):.1f}" x2="{W - PAD_R}" y2="{Y(v):.1f}" '
                       f'stroke="#eee"/><text x="{PAD_L - 4}" y="{Y(v) + 4:.1f}" '
                       f'text-anchor="end">{escape(si(v, "FLOP/s"))}</text>')
    out.append(f'<text x="{(W - PAD_R + PAD_L) / 2}" y="{H - 8}" text-anchor="middle">'
               "arithmetic intensity (FLOP/byte)</text>")
    peak = max((v for _, v in peaks), default=None)
    label_y = -math.inf  # the last slope label's y: the next one goes at least a line below
    for label, bw in sorted(roofs, key=lambda r: -r[1]):
        x_end = min(x_hi, peak / bw) if peak else x_hi  # the slope meets the top compute roof
        y0 = bw * x_lo
        out.append(f'<line x1="{X(x_lo):.1f}" y1="{Y(max(y0, y_lo)):.1f}" x2="{X(x_end):.1f}" '
                   f'y2="{Y(bw * x_end):.1f}" stroke="#444" stroke-width="{1.5 if label.startswith("DRAM") else 1}">'
                   f"<title>{escape(label)}: {escape(si(bw, 'B/s'))}</title></line>")
        x_t = x_lo * 1.5  # the label sits on its slope, at the left where the slopes part
        label_y = max(Y(max(bw * x_t, y_lo)) - 5, label_y + 13)
        out.append(f'<text x="{X(x_t) + 4:.1f}" y="{label_y:.1f}">'
                   f"{escape(label)} {escape(si(bw, 'B/s'))}</text>")
    for label, p in peaks:
        x0 = max(x_lo, min((p / bw for _, bw in roofs), default=x_lo))
        out.append(f'<line x1="{X(x0):.1f}" y1="{Y(p):.1f}" x2="{X(x_hi):.1f}" y2="{Y(p):.1f}" '
                   f'stroke="#444"><title>{escape(label)}: {escape(si(p, "FLOP/s"))}</title>'
                   f'</line><text x="{W - PAD_R + 4}" y="{Y(p) + 4:.1f}">{escape(label)}</text>')
        # several compute roofs: one label each at the right, the rest in their <title>
    for p in pts:
        color = COLORS.get(p.get("kind"), "#1f77b4")
        r = 5 if p.get("kind") == "workload" else 3.5
        fill = "none" if p.get("kind") in ("predicted", "DRAM", "L2", "L1") else color
        out.append(f'<circle cx="{X(p["intensity"]):.1f}" cy="{Y(p["flop_per_s"]):.1f}" '
                   f'r="{r}" fill="{fill}" stroke="{color}" fill-opacity="0.75">'
                   f'<title>{escape(p.get("text") or p["name"])}</title></circle>')
    kinds = [k for k in COLORS if any(p.get("kind") == k for p in pts)]
    kinds = kinds if len(kinds) > 1 else []  # a legend once there is a choice
    # in the right margin, at its bottom unless a compute roof's label sits there, else at its top
    labels = [Y(p) + 4 for _, p in peaks]
    bottom = H - PAD_B - 16 * (len(kinds) - 1) - 4
    first = bottom if not any(bottom - 14 <= y <= H - PAD_B + 2 for y in labels) else PAD_T + 12
    for i, k in enumerate(kinds):
        y = first + 16 * i
        out.append(f'<circle cx="{W - PAD_R + 10}" cy="{y - 4}" r="4" fill="{COLORS[k]}"/>'
                   f'<text x="{W - PAD_R + 18}" y="{y}">{escape(LEGEND.get(k, k))}</text>')
    out.append("</svg>")
    return "\n".join(out)


LEGEND = {"workload": "whole call", "kernel": "aten op", "predicted": "predicted",
          "DRAM": "op, DRAM bytes (ncu)", "L2": "op, L2 bytes (ncu)", "L1": "op, L1 bytes (ncu)"}
