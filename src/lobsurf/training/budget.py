"""What a run's budget asks of its data and of its target network, checked before the first
step: ``lobsurf train`` prints each warning and trains anyway (the model choice keeps the
best checkpoint), so the user learns what the extra steps would buy and what to change.

* **Revisits**: steps x envs x stride over the training rows; above ``REVISIT_WARNING`` the
  agent starts to memorise the rows (docs/training.md, "Revisits").
* **The target rate**: with Polyak rate tau the target network catches up with the online
  one after about ``TARGET_CATCHUP`` / tau learning steps, and from there the bootstrapped
  value drifts upward and validation decays (docs/training.md, "The target rate").
"""

from __future__ import annotations

import math

#: revisits of each training row above which ``lobsurf train`` warns: beyond it the
#: memorisation gauge climbs on the bundled market (benchmarks/RESULTS.md, "Learning
#: dynamics": at or below 0 up to 64 revisits, +0.05 at 86 and 107, +0.13 at 128, +0.37 at 428)
REVISIT_WARNING = 50


def revisits_per_row(steps: int, envs: int, stride: int, windows: int) -> float:
    """How many times a run visits each training row on average: every env step of every
    learning step walks ``stride`` rows of the ``windows`` rows the simulator trains on."""
    return steps * envs * stride / max(1, windows)


def revisit_warning(steps: int, envs: int, stride: int, windows: int) -> str | None:
    """What to do when a run would revisit each training row more than ``REVISIT_WARNING``
    times (None when it does not)."""
    visits = revisits_per_row(steps, envs, stride, windows)
    if visits <= REVISIT_WARNING:
        return None
    fewer = int(REVISIT_WARNING * max(1, windows) / (envs * stride))
    more = visits / REVISIT_WARNING
    return (f"{steps:,} steps x {envs:,} envs x stride {stride} revisit each of the "
            f"{windows:,} training rows about {visits:,.0f} times (above {REVISIT_WARNING}, "
            f"where the agent starts to memorise them: docs/training.md, \"Revisits\"); "
            f"give it about {more:,.1f}x the data (more days) or at most {fewer:,} steps")


#: learning steps x the target rate after which the bootstrapped value drifts upward and
#: validation capture falls: at tau 0.005 the drift starts near step 2,000 on the proxy
#: market, and the bundled market's CPU default (2,400 steps) ends within 0.9 of its peak
#: (benchmarks/RESULTS.md, "Learning dynamics")
TARGET_CATCHUP = 12.0


def suggested_polyak_tau(steps: int, current: float) -> float:
    """The target rate a run of ``steps`` learning steps takes to stay short of the drift:
    ``TARGET_CATCHUP`` / steps rounded down to two significant digits (so the rate as
    printed stays under it), never faster than ``current``."""
    tau = TARGET_CATCHUP / max(1, steps)
    scale = 10.0 ** (1 - math.floor(math.log10(tau)))
    return min(current, math.floor(tau * scale * (1 + 1e-9)) / scale)


def target_rate_warning(steps: int, polyak_tau: float) -> str | None:
    """What to do when ``steps`` x ``polyak_tau`` passes ``TARGET_CATCHUP`` (None below;
    a relative 1e-9 absorbs the float rounding of a product such as 10,000 x 0.0012)."""
    if steps * polyak_tau <= TARGET_CATCHUP * (1 + 1e-9):
        return None
    tau = suggested_polyak_tau(steps, polyak_tau)
    return (f"{steps:,} steps at learner.polyak_tau {polyak_tau:g} let the target network catch "
            f"up after about {TARGET_CATCHUP / polyak_tau:,.0f} steps, and from there the "
            f"value drifts up and validation decays (docs/training.md, \"The target rate\"); "
            f"for this budget --set learner.polyak_tau={tau:g}")
