"""Where the compiled step's PyTorch (non-Inductor) kernels come from (CUDA only).

``graph_timeline.py`` names the graphed step's kernels but not who launched them: inside a
CUDA graph there is no CPU side. This script runs the same compiled step un-graphed, profiles
one step with Python stacks, and for every device kernel that is neither Inductor's
(``triton_*``), ours (Triton kernels named ``_*``) nor cuBLAS's, prints the aten op that
launched it, the op's input shapes and the innermost lobsurf frame above it, summed over
identical sources: the eager copies, fills and reductions left between the compiled pieces.

    python3 benchmarks/eager_kernel_sources.py --batch 1024 --layers 2
"""

from __future__ import annotations

import argparse
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


def own_frame(event) -> str:
    """The innermost project frame above ``event``: the profiler records each Python call as
    an event of its own ("file(line): function"), a parent of the ops it ran (older torch
    put the frames in the op's ``stack`` instead: both are read)."""
    while event is not None:
        for frame in (event.name, *(getattr(event, "stack", None) or [])):
            if any(part in frame for part in OWN_FRAMES) and "eager_kernel_sources" not in frame:
                return frame
        event = event.cpu_parent
    return "?"


def sources(events) -> Counter:
    """{(op, input shapes, frame, kernel): [launches, device us]} over ``events``
    (FunctionEvents: CPU ops with the device kernels they launched)."""
    out: Counter = Counter()
    counts: Counter = Counter()
    for e in events:
        for k in getattr(e, "kernels", []):
            if not is_eager_kernel(k.name):
                continue
            key = (e.name, str(getattr(e, "input_shapes", ""))[:80], own_frame(e), k.name[:70])
            out[key] += k.duration
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
    found = sources(prof.events())
    total = sum(us for _, us in found.values())
    print(f"B = {args.batch}, {args.layers} layers: {sum(n for n, _ in found.values())} eager "
          f"kernels, {total / 1e3:.3f} ms of device time in one compiled step")
    print("launches   us  op | input shapes | frame | kernel")
    for key, (n, us) in sorted(found.items(), key=lambda kv: -kv[1][1]):
        op, shapes, frame, kernel = key
        print(f"{n:5d} {us:7.1f}  {op} | {shapes} | {frame} | {kernel}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
