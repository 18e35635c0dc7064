"""The transfer fit recovers known latency and bandwidth from timings, and degenerate timings
(no per-byte cost, too few sizes) give the documented answers; the Send fit of a core group
counts TensorFlow's own Sends and writes its figure into the group's links."""

import numpy as np
import pytest

from tf_autoplace.core.cluster import Cluster
from tf_autoplace.errors import ConfigError
from tf_autoplace.hw.runner import RunConfig
from tf_autoplace.hw.transfers import (NO_COPY_BANDWIDTH_GBPS, fit_transfer, ladder_placements,
                                       measure_send_cost, profile_send_costs)

SIZES = np.array([1 << 10, 1 << 16, 1 << 20, 1 << 23], np.float64)


def test_recovers_latency_and_bandwidth_from_exact_timings():
    latency, bandwidth = 25e-6, 7.6e9
    fit = fit_transfer(SIZES, latency + SIZES / bandwidth)
    assert fit.latency_s == pytest.approx(latency, rel=1e-9)
    assert fit.bandwidth_bps == pytest.approx(bandwidth, rel=1e-9)
    assert fit.rms_error_s < 1e-15
    np.testing.assert_allclose(fit.time(SIZES), latency + SIZES / bandwidth)


def test_recovers_them_from_noisy_timings():
    rng = np.random.default_rng(0)
    latency, bandwidth = 12e-6, 12e9
    sizes = np.repeat(SIZES, 5)
    times = (latency + sizes / bandwidth) * rng.normal(1.0, 0.02, len(sizes))
    fit = fit_transfer(sizes, times)
    assert fit.latency_s == pytest.approx(latency, rel=0.1)
    assert fit.bandwidth_bps == pytest.approx(bandwidth, rel=0.05)


def test_no_per_byte_cost_means_the_no_copy_bandwidth():
    # Logical CPUs hand tensors over by reference: the time does not grow with the size (here
    # it even shrinks a little, as noise can make it); the fit keeps both terms >= 0.
    fit = fit_transfer(SIZES, [30e-6, 29e-6, 31e-6, 28e-6])
    assert fit.bandwidth_bps == NO_COPY_BANDWIDTH_GBPS * 1e9
    assert fit.latency_s == pytest.approx(29.5e-6)


def test_negative_intercept_is_clipped_to_a_pure_bandwidth_fit():
    bandwidth = 5e9
    times = SIZES / bandwidth - 4e-6  # an intercept below zero: the fit takes latency 0
    fit = fit_transfer(SIZES, times)
    assert fit.latency_s == 0.0
    assert fit.bandwidth_bps == pytest.approx(bandwidth, rel=0.01)


@pytest.mark.parametrize("sizes, times", [([1024, 1024], [1e-5, 2e-5]), ([1024], [1e-5]),
                                          ([1, 2], [1e-5, np.nan])])
def test_bad_timings_are_config_errors(sizes, times):
    with pytest.raises(ConfigError):
        fit_transfer(sizes, times)


def test_ladder_placements_cut_from_no_edge_to_every_edge():
    placements = ladder_placements(4, 6, seed=0)
    assert not placements["single"].any()
    assert (placements["alternate chains"][:, 0] == [0, 1, 0, 1]).all()
    assert len({p.tobytes() for p in placements.values()}) == len(placements)


@pytest.mark.slow
def test_the_send_fit_counts_tensorflows_sends_and_fits_the_work_per_send():
    cluster = Cluster.local(num_logical_cpus=2)
    config = RunConfig(steps=3, warmup_steps=1)
    fitted, fits = profile_send_costs(cluster, config=config)
    fit = fits[cluster.core_groups[0][0]]
    single, alternate = fit.sends[0], fit.sends[1]
    assert single == 0 and alternate > 0  # TF's own count, from its partition graphs
    assert fit.send_s >= 0 and fit.base_s >= 0 and len(fit.seconds) == len(fit.sends)
    assert len(fit.block_send_s) == 5 and fit.step_send_s >= 0  # LADDER_BLOCKS, each fitted
    assert fit.send_s == pytest.approx(np.median(fit.block_send_s))
    assert fitted.latency[0, 1] == fitted.latency[1, 0] == fit.send_s
    np.testing.assert_array_equal(fitted.bandwidth, cluster.bandwidth)


def test_a_send_joins_two_devices():
    with pytest.raises(ConfigError, match="twice"):
        measure_send_cost("/device:CPU:0", "/device:CPU:0")
    with pytest.raises(ConfigError, match="blocks must be an int >= 1"):
        measure_send_cost("/device:CPU:0", "/device:CPU:1", blocks=0)
