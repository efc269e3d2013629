"""Screenshots for docs/dashboard.md: the viewport (not the full page, to keep the files small)
at 1280x800 and 390x844, written to docs/screenshots/<name>-desktop.png and -phone.png."""

from __future__ import annotations

from pathlib import Path

DOCS = Path(__file__).resolve().parent.parent.parent / "docs" / "screenshots"
SIZES = {"desktop": (1280, 800), "phone": (390, 844)}


def doc_shot(page, name: str, widths=("desktop", "phone"), element: str | None = None) -> None:
    """`element`: a selector scrolled into view first (after the resize, which moves the page)."""
    DOCS.mkdir(exist_ok=True)
    before = page.viewport_size
    for label in widths:
        w, h = SIZES[label]
        page.set_viewport_size({"width": w, "height": h})
        if element:
            page.locator(element).first.scroll_into_view_if_needed()
        page.screenshot(path=str(DOCS / f"{name}-{label}.png"))
    if before:
        page.set_viewport_size(before)
