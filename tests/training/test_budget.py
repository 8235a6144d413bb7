"""The budget's warnings: the revisit estimate and the target rate, each silent up to its
threshold and naming what to change above it."""

from lobsurf.agent.config import LearnerConfig
from lobsurf.training.config import RunConfig
from lobsurf.training.budget import (
    REVISIT_WARNING,
    TARGET_CATCHUP,
    revisit_warning,
    revisits_per_row,
    suggested_polyak_tau,
    target_rate_warning,
)


def test_revisits_count_every_env_step_over_its_stride():
    assert revisits_per_row(steps=1000, envs=64, stride=10, windows=64_000) == 10.0
    assert revisits_per_row(steps=10_000, envs=1024, stride=10, windows=256_000) == 400.0


def test_warning_only_above_the_threshold_and_names_both_remedies():
    windows = 64_000
    at = REVISIT_WARNING * windows // (64 * 10)  # exactly the threshold (5,000 steps)
    assert revisits_per_row(at, 64, 10, windows) == REVISIT_WARNING
    assert revisit_warning(at, 64, 10, windows) is None
    msg = revisit_warning(at + 10, 64, 10, windows)
    assert msg is not None and "more days" in msg and "steps" in msg
    fewer = int(msg.rsplit("at most ", 1)[1].split(" steps")[0].replace(",", ""))
    assert fewer <= at and revisits_per_row(fewer, 64, 10, windows) <= REVISIT_WARNING


def test_the_default_budget_keeps_the_default_target_rate():
    cfg = RunConfig()
    assert cfg.train.steps * cfg.learner.polyak_tau <= TARGET_CATCHUP
    assert target_rate_warning(cfg.train.steps, cfg.learner.polyak_tau) is None


def test_target_rate_warning_above_the_catch_up_names_a_rate_that_stays_under_it():
    tau = LearnerConfig().polyak_tau
    at = int(TARGET_CATCHUP / tau)  # exactly the catch-up (2,400 steps at 0.005)
    assert target_rate_warning(at, tau) is None
    msg = target_rate_warning(10_000, tau)
    assert msg is not None and "learner.polyak_tau=" in msg
    suggested = float(msg.rsplit("learner.polyak_tau=", 1)[1])
    assert suggested < tau and 10_000 * suggested <= TARGET_CATCHUP * 1.01
    assert target_rate_warning(10_000, suggested_polyak_tau(10_000, tau)) is None
    for steps in (3_000, 7_000, 8_000, 9_000, 11_000, 25_000):  # the printed rate stays under
        printed = float(target_rate_warning(steps, tau).rsplit("learner.polyak_tau=", 1)[1])
        assert target_rate_warning(steps, printed) is None, steps
    assert suggested_polyak_tau(1_000, tau) == tau  # never faster than the configured rate
