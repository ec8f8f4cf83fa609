"""The contended ITP cluster's spec as generated from the traces, with equal weights or weights that follow the
quotas (examples/itp/contended.yaml, examples/itp/contended-weighted.yaml)."""

from __future__ import annotations

import pytest
import yaml

from fairpod.sim.contended import contended_doc

from .helpers import ITP_DIR, ROOT

pytestmark = pytest.mark.skipif(not ITP_DIR.is_dir(), reason="the ITP traces are not beside the checkout")


@pytest.mark.parametrize(("weights", "example"), [("equal", "contended.yaml"), ("quota", "contended-weighted.yaml")])
def test_the_examples_are_the_generated_specs(weights, example):
    doc = contended_doc(ITP_DIR, weights=weights)
    assert yaml.safe_load((ROOT / "examples" / "itp" / example).read_text()) == doc
    for t in doc["teams"]:
        assert t["fair_share_weight"] == (t["quota"][0]["count"] if weights == "quota" else 50)


def test_unknown_weights_are_refused():
    with pytest.raises(ValueError, match="weights must be equal or quota"):
        contended_doc(ITP_DIR, weights="random")
