"""Bad Kueue objects never crash 'fairpod import kueue': any object of an export, with any field replaced by
junk or removed, is either read or refused with one ImportError_ naming the problem."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairpod.formats.kube.export import export_kueue
from fairpod.formats.kube.importer import import_kueue
from fairpod.formats.kube.kueue_objects import ImportError_

from .specs import corpus

SEED = export_kueue(corpus()["examples/seed/spec.yaml#0"]).objects
HYPERPOD = yaml.safe_load((Path(__file__).parent / "hyperpod" / "kubectl-get.yaml").read_text())["items"]
JUNK = st.one_of(st.none(), st.booleans(), st.integers(-10**6, 10**6), st.floats(allow_nan=True),
                 st.text(max_size=12), st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3),
                                                                                          st.integers(), max_size=2))


def paths(v: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(v, dict):
        for k, x in v.items():
            out += paths(x, (*prefix, k))
    elif isinstance(v, list):
        for i, x in enumerate(v):
            out += paths(x, (*prefix, i))
    return out


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_junk_anywhere_is_read_or_refused_in_one_line(data: st.DataObject):
    docs = copy.deepcopy(SEED)
    for _ in range(data.draw(st.integers(1, 3))):
        path = data.draw(st.sampled_from(paths(docs)[1:]))
        parent = docs
        for p in path[:-1]:
            parent = parent[p]
        if data.draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        else:
            parent[path[-1]] = data.draw(JUNK)
        if not all(isinstance(d, dict) for d in docs):
            break
    try:
        import_kueue(docs)
    except ImportError_ as e:
        assert "\n" not in str(e) and str(e)


@pytest.mark.parametrize("original", [SEED, HYPERPOD], ids=["fairpod-export", "hyperpod-objects"])
def test_every_single_field_replaced_or_removed_is_read_or_refused_in_one_line(original: list[Any]):
    """Exhaustive: each field of each object (of the seed export; of HyperPod's objects), removed or replaced by
    each kind of junk."""
    junk: list[Any] = [None, True, -1, 2.5, "x", [], [1], {}, {"a": 1}]
    tried = refused = 0
    for path in paths(original)[1:]:
        for value in [*junk, KeyError]:
            docs = copy.deepcopy(original)
            parent: Any = docs
            for p in path[:-1]:
                parent = parent[p]
            if value is KeyError:
                if not isinstance(parent, dict):
                    continue
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
            tried += 1
            try:
                import_kueue(docs)
            except ImportError_ as e:
                refused += 1
                assert "\n" not in str(e) and str(e), path
            except Exception as e:  # noqa: BLE001 - the point of the test
                raise AssertionError(f"{path} = {value!r}: {type(e).__name__}: {e}") from e
    assert tried > 500 and refused > 100, (tried, refused)


@pytest.mark.parametrize("path", [(2, "spec", "nodeLabels", "node.kubernetes.io/instance-type"),
                                  (5, "spec", "cohortName")])
def test_a_newline_in_a_quoted_string_is_shown_escaped(path: tuple):
    # found by the property test above: a label value or a cohort name with a line break split the message
    docs = copy.deepcopy(SEED)
    parent: Any = docs
    for p in path[:-1]:
        parent = parent[p]
    parent[path[-1]] = "bad\nname"
    with pytest.raises(ImportError_) as e:
        import_kueue(docs)
    assert "\n" not in str(e.value) and "bad\\nname" in str(e.value)
