"""``fairpod hyp … hyp-space``: the team its --namespace or --queue-name names, in HyperPod's forms
(fairpod.formats.hyperpod, the one home of those names)."""

from __future__ import annotations

import pytest

from fairpod.cli.errors import CliError
from fairpod.cli.hyp_space import team_of


def test_the_team_of_a_namespace_or_a_queue():
    assert team_of("create", "hyperpod-ns-smith", None) == "smith"
    assert team_of("create", None, "hyperpod-ns-ml-team-localqueue") == "ml-team"
    assert team_of("create", "hyperpod-ns-smith", "hyperpod-ns-smith-localqueue") == "smith"
    assert team_of("create", None, None) is None


@pytest.mark.parametrize(("ns", "queue", "says"), [
    ("default", None, "--namespace 'default' is not a team's: use hyperpod-ns-<team>"),
    (None, "smith-queue", "--queue-name 'smith-queue' is not a team's: use hyperpod-ns-<team>-localqueue"),
    ("hyperpod-ns-Smith", None, "--namespace 'hyperpod-ns-Smith' is not a team's"),
    ("hyperpod-ns-smith", "hyperpod-ns-john-localqueue", "--namespace and --queue-name name different teams"),
])
def test_a_name_of_no_team_is_said_in_one_line(ns, queue, says):
    with pytest.raises(CliError, match=None) as e:
        team_of("create", ns, queue)
    assert says in str(e.value) and str(e.value).startswith("hyp create hyp-space: ")
