"""The shipped GDP policy, pinned: its greedy placement, simulated step time and the
log-probability of each greedy choice on fixed generated graphs (2, 4 and 8 GPUs) must stay what
``testdata/gdp_golden.json`` recorded; so must the greedy choices and their log-probabilities
of the same network with any all-zero weights filled (``testing.policies.live_weights``) and the
hint withheld: the shipped policy's greedy placement follows the hint on most groups, so the
live copy without it is what shows the features, the reading order and the network.

A change of the features, the grouping, the reading order, the network or the weights changes
them and fails here; if the change is meant, regenerate the file with
``python tools/make_gdp_golden.py`` (testdata/README.md) and say why in the commit."""

import dataclasses
import json
import os

import numpy as np
import pytest

from tf_autoplace.learning.eager import policy_context
from tf_autoplace.placers import GdpPlacer
from tf_autoplace.placers.gdp.features import graph_features
from tf_autoplace.placers.gdp.placer import SHIPPED_POLICY
from tf_autoplace.placers.gdp.policy import greedy, greedy_log_probs
from tf_autoplace.testing.policies import live_weights
from tf_autoplace.testing.problems import random_problem

from tests.conftest import REPO

with open(os.path.join(REPO, "testdata", "gdp_golden.json"), encoding="utf-8") as f:
    GOLDEN = json.load(f)


@pytest.fixture(scope="module")
def shipped():
    placer = GdpPlacer()
    with policy_context():
        policy, source = placer.load_policy()
    assert source == SHIPPED_POLICY  # the shipped policy is there and loads without network
    return policy


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: f"{g['case']['num_gpus']}gpus")
def test_shipped_policy_places_the_golden_graphs_as_recorded(shipped, golden):
    problem = random_problem(**golden["case"])
    graph = graph_features(problem, hint=shipped.config["hint"])
    assert graph.num_groups == golden["groups"]
    with policy_context():
        logits = shipped.graph_logits(graph)
    devices = graph.op_placement(greedy(logits))
    np.testing.assert_array_equal(devices, golden["devices"])
    np.testing.assert_allclose(greedy_log_probs(logits)[graph.movable],
                               golden["greedy_log_probs"], rtol=1e-4, atol=1e-5)
    assert problem.simulator.run(devices).makespan == pytest.approx(golden["step_s"], rel=1e-9)
    assert len(set(golden["devices"])) > 1  # the pinned placement is not a trivial one


@pytest.mark.parametrize("golden", GOLDEN, ids=lambda g: f"{g['case']['num_gpus']}gpus")
def test_the_shipped_network_with_live_weights_reads_the_golden_graphs_as_recorded(shipped,
                                                                                  golden):
    graph = graph_features(random_problem(**golden["case"]), hint=shipped.config["hint"])
    graph = dataclasses.replace(graph, hint=0 * graph.hint)
    weights = shipped.get_weights()
    with policy_context():
        shipped.set_weights(live_weights(weights))
        try:
            logits = shipped.graph_logits(graph)
        finally:
            shipped.set_weights(weights)
    np.testing.assert_array_equal(greedy(logits)[graph.movable], golden["live_greedy"])
    np.testing.assert_allclose(greedy_log_probs(logits)[graph.movable],
                               golden["live_log_probs"], rtol=1e-4, atol=1e-5)
