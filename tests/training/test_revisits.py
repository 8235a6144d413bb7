"""The revisit estimate and the warning ``lobsurf train`` prints above its threshold."""

from lobsurf.training.data import REVISIT_WARNING, revisit_warning, revisits_per_row


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
