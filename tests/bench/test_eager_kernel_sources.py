"""benchmarks/eager_kernel_sources.py's attribution: which kernels count as a plain PyTorch
op's, the project frame found above an op (frames as parent events, or an op's own stack),
and the sums per source; on hand-made profiler events, and on a real CPU profile's frames."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import eager_kernel_sources as eks  # noqa: E402


def test_library_and_generated_kernels_are_not_eager():
    assert eks.is_eager_kernel("void at::native::reduce_kernel<128, 4>")
    assert eks.is_eager_kernel("Memset (Device)")
    for name in ("triton_poi_fused_0", "_conv_walk_fwd_kernel", "nvjet_sm90_tst_64x64",
                 "void cublasLt::splitKreduce_kernel<32>"):
        assert not eks.is_eager_kernel(name), name


def _call(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "python_function", "name": name, "ts": ts, "dur": dur, "tid": tid}


def _op(name: str, ts: float, ext: int, dims: list, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": 1.0, "tid": tid,
            "args": {"External id": ext, "Input Dims": dims}}


def _kernel(name: str, ext: int, dur: float, cat: str = "kernel") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": 0.0, "dur": dur,
            "args": {"External id": ext}}


def test_trace_sources_join_kernels_to_ops_and_the_calls_around_them():
    trace = {"traceEvents": [
        _call("src/lobsurf/agent/learn.py(122): losses", 0.0, 100.0),
        _call("torch/nn/functional.py(10): linear", 10.0, 20.0),
        _call("src/lobsurf/agent/optim.py(7): step", 50.0, 10.0),
        _call("src/lobsurf/agent/replay.py(3): write", 0.0, 100.0, tid=2),
        _op("aten::copy_", 12.0, 1, [[4, 3]]),
        _op("aten::copy_", 15.0, 2, [[4, 3]]),
        _op("aten::sum", 55.0, 3, [[8]]),
        _op("aten::fill_", 70.0, 4, [[2]]),
        _op("aten::index_copy_", 5.0, 5, [[9]], tid=2),
        _kernel("void at::native::direct_copy", 1, 2.0),
        _kernel("void at::native::direct_copy", 2, 3.0),
        _kernel("triton_poi_fused_1", 2, 9.0),
        _kernel("void at::native::reduce_kernel", 3, 5.0),
        _kernel("Memset (Device)", 4, 1.0, cat="gpu_memset"),
        _kernel("void at::native::index_copy", 5, 4.0),
        _kernel("void at::native::orphan", 99, 7.0),
    ]}
    found = eks.trace_sources(trace)
    step, linear = "src/lobsurf/agent/learn.py(122): losses", "torch/nn/functional.py(10): linear"
    assert found[("aten::copy_", "[[4, 3]]", step, linear, "void at::native::direct_copy")] \
        == (2, 5.0)
    optim = "src/lobsurf/agent/optim.py(7): step"
    assert found[("aten::sum", "[[8]]", optim, optim, "void at::native::reduce_kernel")] \
        == (1, 5.0)
    assert found[("aten::fill_", "[[2]]", step, step, "Memset (Device)")] == (1, 1.0)
    replay = "src/lobsurf/agent/replay.py(3): write"
    assert found[("aten::index_copy_", "[[9]]", replay, replay,
                  "void at::native::index_copy")] == (1, 4.0)
    assert found[("?", "", "?", "?", "void at::native::orphan")] == (1, 7.0)
    assert len(found) == 5  # the Triton kernel is not counted


def test_a_real_profile_trace_names_the_calling_project_frame(tmp_path):
    # the Chrome trace of a real (CPU) profile: the ops inside a lobsurf function must be
    # attributed to that function's frame
    import json

    from lobsurf.agent.network import AgentOutput
    from lobsurf.models.precision import float_outputs

    out = AgentOutput(*(torch.zeros(2, 3, dtype=torch.bfloat16) for _ in range(6)))
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as prof:
        float_outputs(out)
    prof.export_chrome_trace(str(tmp_path / "trace.json"))
    trace = json.loads((tmp_path / "trace.json").read_text())
    frames = eks.python_frames(trace)
    copies = [ev for ev in trace["traceEvents"]
              if ev.get("cat") == "cpu_op" and ev["name"] in ("aten::copy_", "aten::_to_copy")]
    assert copies
    for ev in copies:
        own, inner = eks.enclosing_frames(frames[ev["tid"]], float(ev["ts"]))
        assert "lobsurf/models/precision.py" in own, own
        assert inner != "?"
