"""docs/grafana-dashboard.json asks only for metrics that /metrics exposes (in-process: the app that ``fairpod up``
builds, on TestClient, with a job running)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from ..server.inproc_api import Api


def test_the_grafana_dashboard_uses_only_exposed_metrics(api: Api):
    dash = json.loads((Path(__file__).parents[2] / "docs" / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    exprs += [v["definition"] for v in dash["templating"]["list"] if "definition" in v]
    used = {m for e in exprs for m in re.findall(r"\bfairpod_[a-z_]+", e)}
    api.submit(name="j", team="john", command=["sleep", "30"])
    api.turn()
    assert api.job("j")["state"] == "Running"
    r = api.request("GET", "/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    exposed = {s.name for fam in text_string_to_metric_families(r.text) for s in fam.samples}
    assert used and used <= exposed, used - exposed
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])
