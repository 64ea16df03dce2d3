"""Peer groups from shared work (detect/groups.py, detect/comove.py) on hand-made GPU activity:
nodes are peers when their activity moves together, not when their levels are alike."""

from __future__ import annotations

import itertools

import numpy as np

from peerwatch.detect.groups import IDLE, LONE, MAIN, OTHER, move_keys, workload_groups

STEPS = 240  # two hours at 30 s: the hold window (30 min) is 60 steps, the join window 20


def job(rng: np.random.Generator, nodes: int, level: float = 97.0) -> np.ndarray:
    """A synchronous job: every node at ``level`` with scrape noise, a missed scrape now and then, and
    a checkpoint at step 100 that every node shares (rank 0 lingers three steps more)."""
    a = level + rng.normal(0, 1.5, (nodes, STEPS))
    a[:, 100:106] = 12 + rng.normal(0, 1, (nodes, 6))
    a[0, 106:109] = 15.0
    a[rng.random(a.shape) < 0.05] = np.nan
    return a


def groups(activity: np.ndarray) -> np.ndarray:
    whole, _ = workload_groups(activity, activity.shape[0], STEPS)
    # the same streamed in chunks, one step at a time in places
    parts, state = [], None
    for a, b in itertools.pairwise([0, 1, 37, 38, 39, 120, 121, STEPS]):
        part, state = workload_groups(activity[:, a:b], activity.shape[0], b - a, state)
        parts.append(part)
    np.testing.assert_array_equal(np.concatenate(parts, axis=1), whole)
    return whole


def test_a_shared_checkpoint_dip_and_missed_scrapes_keep_every_node_in_the_main_job() -> None:
    g = groups(job(np.random.default_rng(1), 10))
    assert (g[:, 5:] == MAIN).all()


def test_a_node_at_the_main_level_moving_on_its_own_is_not_a_peer() -> None:
    rng = np.random.default_rng(2)
    a = job(rng, 11)
    own = 97 + rng.normal(0, 1.5, STEPS)  # the main job's level, but not its checkpoint ...
    for start in range(7, STEPS, 17):  # ... and dips of its own
        own[start : start + 4] = 55.0
    a[10] = own
    g = groups(a)
    assert np.mean(g[10, 30:] == LONE) > 0.9
    assert (g[:10, 5:] == MAIN).all()


def test_a_node_that_fails_suddenly_stays_among_its_peers_for_a_while() -> None:
    a = job(np.random.default_rng(3), 10)
    a[4, 150:] = 0.0  # its GPUs stop: no work, no shared checkpoint rhythm
    g = groups(a)
    assert (g[4, 150:205] == MAIN).all()  # long enough to stand out against its peers (~30 min)
    assert g[4, -1] == IDLE


def test_a_spare_that_joins_the_job_is_a_peer_within_minutes() -> None:
    rng = np.random.default_rng(4)
    a = job(rng, 10)
    a[9, :160] = rng.uniform(0, 2, 160)
    assert (groups(a)[9, 180:] == MAIN).all()  # within ten minutes


def test_four_nodes_moving_together_are_a_second_job_and_unsynchronised_light_jobs_are_not() -> None:
    rng = np.random.default_rng(5)
    a = np.concatenate([job(rng, 10), np.zeros((7, STEPS))])
    second = 70 + rng.normal(0, 1.0, (4, STEPS))
    second[:, 60:66] = 8.0  # its own checkpoint, not the main job's
    a[10:14] = second
    t = np.arange(STEPS)
    for i, (level, period) in enumerate([(45.0, 9.0), (55.0, 23.0), (68.0, 14.0)]):  # each its own rhythm
        a[14 + i] = level + 12 * np.sin(2 * np.pi * t / period + i) + rng.normal(0, 3, STEPS)
    a[14:, 30:40] = np.nan  # missed scrapes
    g = groups(a)
    assert (g[10:14, 40:] == OTHER).all()
    assert (g[14:, 30:] == LONE).all()
    assert (g[:10, 5:] == MAIN).all()
    # three light jobs alone are no second job
    assert not (groups(np.delete(a, range(10, 14), axis=0)) == OTHER).any()


def test_lone_nodes_share_no_moves_in_the_policy() -> None:
    keys = move_keys(np.array([MAIN, LONE, MAIN, LONE, IDLE, OTHER]))
    assert keys[0] == keys[2] == MAIN and keys[4] == IDLE and keys[5] == OTHER
    assert keys[1] != keys[3] and min(keys[1], keys[3]) < 0


def test_scrapes_that_catch_the_step_rhythm_at_their_own_phase_keep_a_job_together() -> None:
    """60-s scrapes of a job whose GPUs are busy for 80% of each step: each sample is 100 or 40."""
    rng = np.random.default_rng(6)
    a = np.where(rng.random((12, STEPS)) < 0.8, 100.0, 40.0)
    a[:, 100:104] = 5.0  # a checkpoint
    a[11] = 55 + 15 * np.sin(np.arange(STEPS) / 4) + rng.normal(0, 3, STEPS)  # and a node on its own work
    g, _ = workload_groups(a, 12, STEPS, step=60.0)
    assert np.mean(g[:11, 10:] == MAIN) > 0.99 and np.mean(g[11, 10:] == LONE) > 0.9
