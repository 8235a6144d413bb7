"""``lobsurf report RUN``: write RUN/report/index.html (self-contained; opens offline) and its
PNG figures: held-out metrics of the agent beside every baseline, equity and drawdown,
training curves, actions, the position over the mid-price, walk-forward folds, the config.

Works on a run that is still training (it reports what is there and says what is missing).
On a seed group (``lobsurf train --seeds N``) the page is the verdict over seeds
(lobsurf.report.seeds).
``--tensorboard`` also mirrors metrics.jsonl into RUN/tb/ for ``tensorboard --logdir RUN/tb``.
"""

from __future__ import annotations

import argparse
import sys
from functools import partial
from pathlib import Path

from lobsurf.progress import add_progress_flag


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from lobsurf.commands.args import DefaultsFormatter
    from lobsurf.report.build import ReportConfig

    parser.formatter_class = DefaultsFormatter
    d = ReportConfig()
    parser.add_argument("run", help="a training run folder (lobsurf train)")
    parser.add_argument("--store", default=None,
                        help="evaluate on another store (default: the run's own held-out rows)")
    parser.add_argument("--policy", dest="acting_policy", choices=("greedy", "thompson", "pi"),
                        default=d.policy, help="the agent's acting policy in the held-out sweep")
    parser.add_argument("--envs", type=int, default=d.num_envs,
                        help="environments of the held-out sweep")
    parser.add_argument("--sample-steps", type=int, default=d.sample_steps,
                        help="held-out steps drawn in the position figure")
    parser.add_argument("--device", default=d.device, help="torch device (cpu, cuda)")
    parser.add_argument("--eval", action=argparse.BooleanOptionalAction, default=True,
                        help="sweep the newest checkpoint over held-out rows")
    parser.add_argument("--tensorboard", action="store_true",
                        help="also mirror metrics.jsonl into RUN/tb/ (needs the tensorboard "
                             "package: pip install 'lobsurf[tensorboard]')")
    add_progress_flag(parser)


def run(args: argparse.Namespace) -> int:
    from lobsurf.devices import resolve_device
    from lobsurf.errors import UserError
    from lobsurf.report.build import ReportConfig, build_report

    run_dir = Path(args.run)
    try:
        cfg = ReportConfig(store=args.store, policy=args.acting_policy,
                           device=str(resolve_device(args.device)), num_envs=args.envs,
                           sample_steps=args.sample_steps, evaluate=args.eval)
    except ValueError as exc:
        raise UserError(str(exc)) from exc
    # a bar for the sweep only (a spinner cannot run around a progress bar)
    progress = partial(_sweep_progress, enabled=args.progress)
    from lobsurf.training.run.seed_group import is_seed_group

    if is_seed_group(run_dir):
        from lobsurf.report.seeds import build_group_report

        if args.tensorboard or not args.eval:
            raise UserError("a seed group's page is its held-out verdict: --tensorboard and "
                            "--no-eval apply to one seed's folder (RUN/seed_S)")
        report = build_group_report(run_dir, cfg, progress)
    else:
        report = build_report(run_dir, cfg, progress)
    for note in report.notes:
        print(f"lobsurf report: note: {note}", file=sys.stderr)
    if args.tensorboard:
        from lobsurf.telemetry.tensorboard import mirror_metrics_file

        tb = mirror_metrics_file(run_dir)
        print(f"tensorboard: {tb}   (tensorboard --logdir {tb})")
    print(f"report: {report.path}   ({len(report.figures)} figures; open it in a browser)")
    return 0


def _sweep_progress(steps: int, enabled: bool):
    from lobsurf.progress import step_progress

    return step_progress(steps, "report: held-out sweep", enabled)
