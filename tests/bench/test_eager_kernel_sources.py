"""benchmarks/eager_kernel_sources.py's attribution: which kernels count as a plain PyTorch
op's, the project frame found above an op (frames as parent events, or an op's own stack),
and the sums per source; on hand-made profiler events, and on a real CPU profile's frames."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import eager_kernel_sources as eks  # noqa: E402


@dataclass
class Kernel:
    name: str
    duration: float


@dataclass
class Event:
    name: str
    cpu_parent: "Event | None" = None
    kernels: list[Kernel] = field(default_factory=list)
    stack: list[str] = field(default_factory=list)
    input_shapes: list = field(default_factory=list)


def test_library_and_generated_kernels_are_not_eager():
    assert eks.is_eager_kernel("void at::native::reduce_kernel<128, 4>")
    assert eks.is_eager_kernel("Memset (Device)")
    for name in ("triton_poi_fused_0", "_conv_walk_fwd_kernel", "nvjet_sm90_tst_64x64",
                 "void cublasLt::splitKreduce_kernel<32>"):
        assert not eks.is_eager_kernel(name), name


def test_sources_sum_per_op_frame_and_kernel():
    step = Event("src/lobsurf/agent/step.py(440): losses")
    inner = Event("torch/nn/functional.py(10): linear", cpu_parent=step)
    copy = Event("aten::copy_", cpu_parent=inner, input_shapes=[[4, 3]],
                 kernels=[Kernel("void at::native::direct_copy", 2.0),
                          Kernel("triton_poi_fused_1", 9.0)])
    again = Event("aten::copy_", cpu_parent=inner, input_shapes=[[4, 3]],
                  kernels=[Kernel("void at::native::direct_copy", 3.0)])
    legacy = Event("aten::sum", stack=["x.py(1): f", "src/lobsurf/agent/optim.py(7): step"],
                   kernels=[Kernel("void at::native::reduce_kernel", 5.0)])
    found = eks.sources([step, inner, copy, again, legacy])
    assert found[("aten::copy_", "[[4, 3]]", step.name, "void at::native::direct_copy")] \
        == (2, 5.0)
    assert found[("aten::sum", "[]", "src/lobsurf/agent/optim.py(7): step",
                  "void at::native::reduce_kernel")] == (1, 5.0)
    assert len(found) == 2  # the Triton kernel is not counted
    assert eks.own_frame(Event("aten::mul")) == "?"


def test_a_real_profile_names_the_calling_project_frame():
    # the profiler of this torch records Python calls as parent events: the op inside a
    # lobsurf function must be attributed to that function's frame
    from lobsurf.models.precision import float_outputs
    from lobsurf.agent.network import AgentOutput

    out = AgentOutput(*(torch.zeros(2, 3, dtype=torch.bfloat16) for _ in range(6)))
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        float_outputs(out)
    copies = [e for e in prof.events() if e.name in ("aten::copy_", "aten::_to_copy")]
    assert copies
    assert all("lobsurf/models/precision.py" in eks.own_frame(e) for e in copies)
