"""Sparklines as inline SVG, rendered on the server.

No chart library: a sparkline is one <polyline> whose points are the values scaled to
the box, a few lines of arithmetic; a library (and its script) would need a CSP exception
or another static asset for what fits in a template. The SVG carries presentation
attributes only (no style attribute, no script), which the CSP allows. Gaps (None, e.g. a
p99 of an interval without requests) are drawn at zero.
"""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup


def sparkline(
    values: Sequence[float | None], width: int = 160, height: int = 32, label: str = ""
) -> Markup:
    """An <svg> of `values` (oldest first) with `label` as its accessible name."""
    numbers = [v or 0.0 for v in values]
    top = max(numbers, default=0.0) or 1.0
    step = width / max(1, len(numbers) - 1)
    coords = " ".join(
        f"{i * step:.1f},{height - 1 - (v / top) * (height - 2):.1f}" for i, v in enumerate(numbers)
    )
    line = f'<polyline class="spark" fill="none" points="{coords}"/>' if len(numbers) > 1 else ""
    return Markup(
        '<svg class="sparkline" role="img" width="{w}" height="{h}" viewBox="0 0 {w} {h}" '
        'aria-label="{label}">{line}</svg>'
    ).format(w=width, h=height, label=label, line=Markup(line))
