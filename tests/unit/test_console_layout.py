"""Every console page has its stem in each folder (CONSOLE.md, console/__init__.py):
console/pages/<page>.py (listed in console/pages/PAGES, with TITLE, PATH and ROUTES under
/ui), console/views/<page>.py and console/templates/<page>.html. A page added with a file
or its registration missing fails here, naming what is missing."""

from __future__ import annotations

from pathlib import Path

from statekeeper.console.pages import PAGES

ROOT = Path(__file__).resolve().parents[2] / "console"


def test_every_page_module_is_registered_and_has_its_view_and_template() -> None:
    stems = sorted(p.stem for p in (ROOT / "pages").glob("*.py") if p.stem != "__init__")
    registered = {m.__name__.rpartition(".")[2] for m in PAGES}
    missing = []
    for stem in stems:
        if stem not in registered:
            missing.append(f"console/pages/{stem}.py is not in console/pages/__init__.py's PAGES")
        if not (ROOT / "views" / f"{stem}.py").exists():
            missing.append(f"console/views/{stem}.py")
        if not (ROOT / "templates" / f"{stem}.html").exists():
            missing.append(f"console/templates/{stem}.html")
    assert missing == []
    assert "cluster" in stems


def test_every_route_is_under_ui_and_the_nav_link_is_a_get_route() -> None:
    for page in PAGES:
        assert page.PATH.startswith("/ui/") and page.TITLE
        routes = {(m, p) for m, p, _ in page.ROUTES}
        assert ("GET", page.PATH) in routes, page.__name__
        assert all(p.startswith("/ui/") and m in ("GET", "POST") for m, p in routes)


def test_no_template_has_inline_script_or_style() -> None:
    """The CSP forbids them: they would not run (htmx attributes and app.css instead)."""
    for template in (ROOT / "templates").glob("*.html"):
        text = template.read_text()
        assert "<style" not in text and " style=" not in text, template.name
        assert "<script>" not in text and " on" + "click=" not in text, template.name
        for line in text.splitlines():
            if "<script" in line:
                assert 'src="' in line, (template.name, line)


def test_every_template_and_static_file_is_package_data() -> None:
    """The console reads its templates and static files from the installed package: each
    must match pyproject's package-data globs, or a wheel install serves no page (checked
    by hand too: a wheel installed in a fresh venv renders /ui/login outside the checkout)."""
    import fnmatch
    import tomllib

    pyproject = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["statekeeper.console"]
    files = [p.relative_to(ROOT).as_posix() for d in ("templates", "static") for p in
             sorted((ROOT / d).iterdir()) if p.is_file()]  # fmt: skip
    assert files and [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)] == []
