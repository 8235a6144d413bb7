"""Simulator step throughput: env steps/s at several batch sizes, eager and CUDA-graph.

    python benchmarks/bench_sim_step.py --device cpu --quick --sizes 1,256 --out /tmp/bench
    python benchmarks/bench_sim_step.py --device cuda --compile-graph --out $OUT
    python benchmarks/bench_sim_step.py --device cuda --profile 65536 --out $OUT
    python benchmarks/bench_sim_step.py --device cuda --compile-graph --passive --sizes 65536 --out $OUT

``--passive`` times every batch size twice, with passive orders off (market orders only)
and on (resting orders, ``--queue-model``), at ``--stride`` rows a decision (10, as
training) and latency 1, on a random-walk book with random prints, and reports the ratio of
their env steps/s (goal: >= 0.5 at B = 65,536 on one GPU). Each env repeats one random
action of the passive action table (posts, cancels, market orders, holds).

Builds its own random-walk book with numpy (no DBN decoder, no gymnasium). Per batch
size: 5 burn-in steps, then the best of 3 timed loops, each bracketed by synchronize;
env-steps/s = B x steps / s. Modes: ``eager``; ``compile`` (``--compile``, ``env.step``
with ``torch.compile(step_values)`` as its kernel, as the training step runs it; the reset
draw stays outside the compiled function, as there); on CUDA ``graph`` (the eager step
captured in one CUDA graph) and ``compile_graph`` (``--compile-graph``, the compiled step
captured). Each compiled or
graphed mode is checked bit for bit against eager steps from the same state before it is
timed. Also reports the ops (CPU) or kernels (CUDA) per step from torch.profiler, and the
bytes of book and state one env-step reads and writes at minimum (every state and stats
field read and written once, one book side row and a mid gathered). ``--profile B`` writes
the top kernels of B envs' eager step by device time (host time on CPU) to
``profile_sim_B_eager.txt`` (with ``--passive`` also the passive step's, and with a
compiled mode the compiled steps', e.g. ``profile_sim_B_compiled_passive.txt``): how the
level cumsum that cost 65 % of the step was found (benchmarks/RESULTS.md, Simulator step).
Prints its table last and writes JSON to --out.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import fields
from pathlib import Path

import torch

from lobsurf.sim import BatchedLobEnv, SimConfig
from lobsurf.sim.books import random_walk_book
from lobsurf.sim.env import step_values

BOOK_ROWS = 1_000_000
QUICK_ROWS = 200_000
#: eager steps recorded by --profile
PROFILE_STEPS = 20


def _parts(env: BatchedLobEnv) -> list:
    """The state objects a step reads and writes (the passive ones where there)."""
    return [p for p in (env.state, env.stats, env.passive_state, env.passive_stats)
            if p is not None]


def min_bytes_per_env_step(env: BatchedLobEnv) -> int:
    per_env = sum(getattr(p, f.name)[:1].nbytes for p in _parts(env) for f in fields(p))
    side = 10 * (env.side_px.element_size() + env.side_sz.element_size())
    book = side + env.mid2_ticks.element_size()
    if env.passive_state is not None:  # both sides of stride + 1 rows, and their prints
        book += (env.cfg.stride + 1) * 2 * (side + 2 * env.side_px.element_size())
    return 2 * per_env + book + 8 + 8  # + action read + reset draw


def count_ops(env: BatchedLobEnv, action: torch.Tensor, cuda: bool) -> int:
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        env.step(action)
        if cuda:
            torch.cuda.synchronize()
    events = prof.events()
    if cuda:
        return sum(1 for e in events if e.device_type == torch.autograd.DeviceType.CUDA)
    views = {"aten::unsqueeze", "aten::unbind", "aten::select", "aten::slice", "aten::view",
             "aten::reshape", "aten::as_strided", "aten::lift_fresh", "aten::detach"}
    # top-level aten ops that compute something (views and no-op dtype checks excluded)
    return sum(1 for e in events if e.name.startswith("aten::") and e.cpu_parent is None
               and e.name not in views)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def time_steps(step, device: torch.device, steps: int, repeats: int = 3) -> float:
    """Seconds for ``steps`` steps: the best of ``repeats`` timed runs after burn-in (the
    CPU machine is shared, so the best run is the least disturbed one)."""
    for _ in range(5):
        step()
    sync(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def capture(env: BatchedLobEnv, action: torch.Tensor, step=None):
    """Capture one step (``step``, default ``env.step``) in a CUDA graph; returns (graph,
    result tensors of the capture). Warm-up on a side stream also finishes any compile."""
    step = step or env.step
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            step(action)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(env.generator)  # the reset draws advance on every replay
    with torch.cuda.graph(graph):
        result = step(action)
    return graph, result


def check_matches_eager(env: BatchedLobEnv, action: torch.Tensor, fast_step) -> None:
    """Four eager steps, then rewind state, stats and generator and run ``fast_step()``
    (returns the reward tensor) four times: rewards and final state must be identical."""
    def snapshot() -> list[torch.Tensor]:
        return [getattr(p, f.name).clone() for p in _parts(env) for f in fields(p)]

    def live() -> list[torch.Tensor]:
        return [getattr(p, f.name) for p in _parts(env) for f in fields(p)]

    start, gen0 = snapshot(), env.generator.get_state()
    eager = []
    for _ in range(4):
        eager.append(env.step(action).reward.clone())
    eager_end = snapshot()
    for t, value in zip(live(), start):
        t.copy_(value)
    env.generator.set_state(gen0)
    for want in eager:
        assert torch.equal(fast_step(), want), "fast step differs from the eager step"
    for i, (t, value) in enumerate(zip(live(), eager_end)):
        assert torch.equal(t, value), f"state field {i} differs from the eager step's"


def bench_one(book, num_envs: int, device: torch.device, steps: int, modes: list[str],
              cfg: SimConfig | None = None):
    env = BatchedLobEnv(book, num_envs, cfg or SimConfig(fee_per_lot=0.5, fee_bps=0.2))
    env.reset()
    action = torch.randint(0, env.cfg.num_actions, (num_envs,), device=device,
                           generator=torch.Generator(device=device).manual_seed(0))
    row = {"num_envs": num_envs, "bytes_per_env_step": min_bytes_per_env_step(env)}
    for mode in modes:
        if mode == "eager":
            step = lambda: env.step(action)  # noqa: E731
        elif mode == "compile":
            kernel = torch.compile(step_values, dynamic=False)
            check_matches_eager(env, action, lambda: env.step(action, kernel=kernel).reward)
            step = lambda: env.step(action, kernel=kernel)  # noqa: E731
        else:
            # "graph": eager ops captured; "compile_graph": the compiled step captured
            kernel = torch.compile(step_values, dynamic=False)
            fn = ((lambda a: env.step(a, kernel=kernel)) if mode == "compile_graph" else None)
            graph, result = capture(env, action, fn)
            check_matches_eager(env, action, lambda: (graph.replay(), result.reward)[1])
            step = graph.replay
        seconds = time_steps(step, device, steps)
        row[f"{mode}_us_per_step"] = seconds / steps * 1e6
        row[f"{mode}_env_steps_per_s"] = num_envs * steps / seconds
    return row, env, action


def profile_step(book, num_envs: int, device: torch.device, out: Path | None,
                 cfg: SimConfig | None = None, compiled: bool = False) -> None:
    """Print (and write to ``out``) the top ops of ``num_envs`` envs' step by device time on
    CUDA, host time on CPU, over ``PROFILE_STEPS`` steps after burn-in: the eager step, or
    with ``compiled`` the ``torch.compile(step_values)`` step (its fused kernels by name)."""
    from torch.profiler import ProfilerActivity, profile

    env = BatchedLobEnv(book, num_envs, cfg or SimConfig(fee_per_lot=0.5, fee_bps=0.2))
    env.reset()
    action = torch.randint(0, env.cfg.num_actions, (num_envs,), device=device)
    kernel = torch.compile(step_values, dynamic=False) if compiled else step_values
    for _ in range(5):
        env.step(action, kernel=kernel)
    sync(device)
    cuda = device.type == "cuda"
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=acts) as prof:
        for _ in range(PROFILE_STEPS):
            env.step(action, kernel=kernel)
        sync(device)
    sort = "self_cuda_time_total" if cuda else "self_cpu_time_total"
    table = prof.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=90)
    what = ("compiled" if compiled else "eager") + (" passive" if env.cfg.passive_orders else "")
    print(f"{PROFILE_STEPS} {what} steps of {num_envs} envs, top ops by {sort}:\n{table}")
    if out:
        out.mkdir(parents=True, exist_ok=True)
        name = what.replace(" ", "_")
        (out / f"profile_sim_{num_envs}_{name}.txt").write_text(table)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--out", type=Path, default=None, help="folder for results JSON")
    parser.add_argument("--quick", action="store_true", help="smaller book and fewer steps")
    parser.add_argument("--compile", action="store_true", help="also time torch.compile(step)")
    parser.add_argument("--no-graph", action="store_true", help="CUDA: skip the graph modes")
    parser.add_argument("--compile-graph", action="store_true",
                        help="CUDA: also time the compiled step captured in a CUDA graph")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch default)")
    parser.add_argument("--sizes", default="1,256,4096,65536", help="comma-separated B values")
    parser.add_argument("--profile", type=int, default=0, metavar="B",
                        help="also print and write the top ops of B envs' eager step")
    parser.add_argument("--passive", action="store_true",
                        help="time each B with passive orders off and on (module docstring)")
    parser.add_argument("--stride", type=int, default=10, help="--passive: rows a decision")
    parser.add_argument("--queue-model", default=SimConfig.queue_model,
                        choices=["risk_averse", "probabilistic"],
                        help="--passive: queue model (power: SimConfig's default)")
    args = parser.parse_args()
    device = torch.device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    book = random_walk_book(QUICK_ROWS if args.quick else BOOK_ROWS, num_segments=4, seed=0,
                            device=device, trades=args.passive)
    modes = ["eager"] + (["compile"] if args.compile else [])
    if device.type == "cuda" and not args.no_graph:
        modes.append("graph")
        if args.compile_graph:
            modes.append("compile_graph")
    if args.passive:
        return passive_main(args, book, device, modes)
    rows = []
    for b in (int(x) for x in args.sizes.split(",")):
        rows.append(bench_one(book, b, device, _steps(args, b, device), modes))
    # ops counted after all timing: a profiler session slows every later eager step on CPU
    for i, (row, env, action) in enumerate(rows):
        row["ops_per_step"] = count_ops(env, action, device.type == "cuda")
        rows[i] = row
    if args.profile:
        profile_step(book, args.profile, device, args.out)
    header = f"{'B':>7} {'ops':>5} {'B/env-step':>10} " + " ".join(
        f"{m + ' us/step':>16} {m + ' env-steps/s':>20}" for m in modes)
    print(header)
    for r in rows:
        print(f"{r['num_envs']:>7} {r['ops_per_step']:>5} {r['bytes_per_env_step']:>10} " + " ".join(
            f"{r[m + '_us_per_step']:>16.1f} {r[m + '_env_steps_per_s']:>20,.0f}" for m in modes))
    info = {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
            "book_rows": len(book), "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_sim_step.json").write_text(json.dumps(info, indent=2))
    assert all(r["eager_env_steps_per_s"] > 0 for r in rows)


def _steps(args, num_envs: int, device: torch.device) -> int:
    if num_envs >= 65536 and device.type == "cpu":
        return 30 if args.quick else 200
    return 100 if args.quick else 1000


def passive_main(args, book, device: torch.device, modes: list[str]) -> None:
    """``--passive``: each B with passive orders off and on; their env steps/s and ratio."""
    base = SimConfig(stride=args.stride, latency_rows=1, fee_per_lot=0.5, fee_bps=0.2)
    on = SimConfig(**{**base.__dict__, "passive_orders": True, "queue_model": args.queue_model,
                      "maker_fee_per_lot": -0.1})
    rows = []
    for b in (int(x) for x in args.sizes.split(",")):
        steps = _steps(args, b, device)
        market, _, _ = bench_one(book, b, device, steps, modes, base)
        passive, _, _ = bench_one(book, b, device, steps, modes, on)
        row = {"num_envs": b, "market": market, "passive": passive}
        row |= {f"{m}_ratio": passive[f"{m}_env_steps_per_s"] / market[f"{m}_env_steps_per_s"]
                for m in modes}
        rows.append(row)
    if args.profile:
        compiled_too = any(m.startswith("compile") for m in modes)
        for cfg in (base, on):
            for compiled in (False, True) if compiled_too else (False,):
                profile_step(book, args.profile, device, args.out, cfg, compiled)
    print(f"stride {args.stride}, latency 1, queue model {args.queue_model}; env steps/s "
          "with passive orders off (market) and on (passive)")
    print(f"{'B':>7} {'mode':>14} {'market':>16} {'passive':>16} {'ratio':>7} "
          f"{'passive B/env-step':>18}")
    for r in rows:
        for m in modes:
            print(f"{r['num_envs']:>7} {m:>14} {r['market'][m + '_env_steps_per_s']:>16,.0f} "
                  f"{r['passive'][m + '_env_steps_per_s']:>16,.0f} {r[m + '_ratio']:>7.2f} "
                  f"{r['passive']['bytes_per_env_step']:>18}")
    info = {"device": str(device), "torch": torch.__version__, "threads": torch.get_num_threads(),
            "gpu": torch.cuda.get_device_name() if device.type == "cuda" else None,
            "book_rows": len(book), "stride": args.stride, "queue_model": args.queue_model,
            "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "bench_sim_step_passive.json").write_text(json.dumps(info, indent=2))
    assert all(r["passive"]["eager_env_steps_per_s"] > 0 for r in rows)


if __name__ == "__main__":
    main()
