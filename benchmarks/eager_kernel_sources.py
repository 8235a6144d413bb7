"""Where the compiled step's PyTorch (non-Inductor) kernels come from (CUDA only).

``graph_timeline.py`` names the graphed step's kernels but not who launched them: inside a
CUDA graph there is no CPU side. This script runs the same compiled step un-graphed, profiles
one step with Python stacks, and for every device kernel that is neither Inductor's
(``triton_*``), ours (Triton kernels named ``_*``) nor cuBLAS's, prints the aten op that
launched it, the op's input dims, the innermost lobsurf frame and the innermost frame of any
code around the op (an Inductor wrapper names the compiled graph; "?" on the autograd
engine's thread), summed over identical sources: the eager copies, fills and reductions
left between the compiled pieces. It reads the profiler's Chrome trace: this torch records
Python calls there but not as the ops' parents.

    python3 benchmarks/eager_kernel_sources.py --batch 1024 --layers 2
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections import Counter
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))
from count_step_kernels import COUNT, build  # noqa: E402

from lobsurf.agent.step import train_step  # noqa: E402
from lobsurf.train.compile import compile_config, compile_networks_  # noqa: E402
from lobsurf.train.config import TrainConfig  # noqa: E402

#: kernel name prefixes of generated or library kernels (not an eager PyTorch op's own)
LIBRARY_PREFIXES = ("triton_", "_", "nvjet", "sm90_", "cutlass", "void cublasLt", "memcpy32",
                    "std::enable_if<!(false), void>::type internal::gemvx")
#: path fragment of the project's own frames
OWN_FRAMES = ("lobsurf/", "benchmarks/")


def is_eager_kernel(name: str) -> bool:
    """Whether a device kernel is a plain PyTorch op's (not Inductor's, ours or a library's)."""
    return not name.startswith(LIBRARY_PREFIXES)


def python_frames(trace: dict) -> dict[int, list[tuple[float, float, str]]]:
    """{thread: [(start us, end us, "file(line): function")]} of the trace's Python calls,
    sorted by start."""
    out: dict[int, list[tuple[float, float, str]]] = {}
    for ev in trace.get("traceEvents", []):
        if ev.get("cat") == "python_function" and "dur" in ev:
            out.setdefault(ev["tid"], []).append((float(ev["ts"]),
                                                  float(ev["ts"]) + float(ev["dur"]), ev["name"]))
    for calls in out.values():
        calls.sort()
    return out


def enclosing_frames(calls: list[tuple[float, float, str]], t: float) -> tuple[str, str]:
    """(innermost project frame, innermost frame of any code) of the Python calls running
    at time t on one thread ("?" where none)."""
    own = inner = "?"
    for start, end, name in calls:
        if start > t:
            break
        if end >= t:  # started before t and still running: later starts are deeper
            inner = name
            if any(part in name for part in OWN_FRAMES) and "eager_kernel_sources" not in name:
                own = name
    return own, inner


def trace_sources(trace: dict) -> Counter:
    """{(op, input dims, project frame, innermost frame, kernel): (launches, device us)} of
    the eager kernels of a Chrome trace, each kernel joined to the CPU op that launched it
    (by "External id") and the op to the Python calls around it (by time, on its thread):
    this torch records Python calls in the trace but not as the ops' parents in
    ``prof.events()``."""
    events = trace.get("traceEvents", [])
    ops = {ev["args"]["External id"]: ev for ev in events
           if ev.get("cat") == "cpu_op" and "External id" in ev.get("args", {})}
    frames = python_frames(trace)
    out: Counter = Counter()
    counts: Counter = Counter()
    for ev in events:
        if ev.get("cat") not in ("kernel", "gpu_memset", "gpu_memcpy"):
            continue
        if not is_eager_kernel(ev["name"]):
            continue
        op = ops.get(ev.get("args", {}).get("External id"))
        if op is None:
            key = ("?", "", "?", "?", ev["name"][:70])
        else:
            own, inner = enclosing_frames(frames.get(op["tid"], []), float(op["ts"]))
            key = (op["name"], str(op["args"].get("Input Dims", ""))[:80], own, inner,
                   ev["name"][:70])
        out[key] += float(ev.get("dur", 0.0))
        counts[key] += 1
    return Counter({key: (counts[key], us) for key, us in out.items()})


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--batch", type=int, default=1024)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    p.add_argument("--warmup", type=int, default=4, help="compiled steps before the profile")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("eager_kernel_sources.py needs CUDA", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as root:
        state, book, scfg = build("cuda", args.batch, args.layers, COUNT, Path(root),
                                  args.precision)
        compile_networks_(state, compile_config(TrainConfig(), "cuda"))
        for _ in range(args.warmup):
            train_step(state, book, scfg, True)
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA],
                     with_stack=True, record_shapes=True) as prof:
            train_step(state, book, scfg, True)
            torch.cuda.synchronize()
        trace_path = Path(root) / "trace.json"
        prof.export_chrome_trace(str(trace_path))
        found = trace_sources(json.loads(trace_path.read_text()))
    total = sum(us for _, us in found.values())
    print(f"B = {args.batch}, {args.layers} layers: {sum(n for n, _ in found.values())} eager "
          f"kernels, {total / 1e3:.3f} ms of device time in one compiled step")
    print("launches   us  op | input dims | project frame | innermost frame | kernel")
    for key, (n, us) in sorted(found.items(), key=lambda kv: -kv[1][1]):
        print(f"{n:5d} {us:7.1f}  " + " | ".join(key))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
