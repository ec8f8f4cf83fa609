"""The dashboard's files: the page and our CSS and JS (``static/``), and ``plotly.min.js`` from the installed
``plotly`` package (nothing third-party is copied here). ``fairpod.server.api.routes_static`` serves them.

The files hold no data (the page asks the API for everything with the user's token). Each is read once and kept
in memory with its gzip-compressed form and its ETag.
"""

from __future__ import annotations

import gzip
import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path

OWN = {"app.js": "text/javascript", "app.css": "text/css", "index.html": "text/html"}
PLOTLY = "plotly.min.js"


class MissingAsset(Exception):
    """A file the dashboard needs is not installed (the message says what to reinstall)."""


def _plotly_path() -> Path:
    try:
        import plotly  # type: ignore[import-untyped]  # plotly ships no type information
    except ImportError:  # pragma: no cover - plotly is a dependency
        raise MissingAsset("the 'plotly' package is not installed; "
                           "reinstall fairpod (pip install fairpod) to get its dependencies") from None
    path = Path(plotly.__file__).parent / "package_data" / PLOTLY
    if not path.exists():
        raise MissingAsset(f"{path} is missing; reinstall the 'plotly' package")
    return path


@lru_cache(maxsize=8)
def load(name: str) -> tuple[bytes, bytes, str]:
    """(raw, gzipped, etag) of one served file."""
    if name == PLOTLY:
        raw = _plotly_path().read_bytes()
    else:
        raw = resources.files("fairpod.dashboard").joinpath("static", name).read_bytes()
    return raw, gzip.compress(raw, 6), hashlib.sha256(raw).hexdigest()[:20]
