"""The web dashboard: static pages of our own (``static/``) that call the JSON API, and the routes that
serve them at ``/`` and ``/static/``. Charts use plotly.js, served from the installed ``plotly`` package."""
