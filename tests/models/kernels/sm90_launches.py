"""Every Triton launch a Mamba2 block and the learner's C51 target make on the default CUDA
path, compiled for Hopper
(sm_90) without a GPU: run as a script (``python -m tests.models.kernels.sm90_launches``)
with TRITON_INTERPRET unset, it prints one JSON line per distinct launch.

Triton's CPU interpreter, which every other kernel test runs in, accepts code its compiler
rejects (a plain-float global read inside a kernel passes in the interpreter and fails to
compile for sm_90). So here nothing runs: each
kernel the block launches is replaced by a recorder, the block runs forward and backward on
CPU tensors (the kernels' outputs are left uninitialised, which no later op minds), and each
recorded launch is then compiled by Triton's own compiler the way a launch on CUDA tensors
would compile it: its tensors' dtypes, the 16-byte alignment of their addresses, the
divisibility by 16 of its integer arguments, its constexprs and warps. What a CPU call does
differently is set as on CUDA: the in-projection is padded to 16-byte rows
(``align.device_multiple``, 1 on CPU), so z's alignment and the strides are CUDA's; ``BF16``
is 1 (the interpreter's rounding path is 2) and ``PREC`` "tf32" (``TF32`` true: training
turns TF32 products on). The last line printed names every kernel the modules define, so
that a test can check that each was compiled.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import sys

import torch

from lobsurf.agent import c51_triton
from lobsurf.models import mamba2
from lobsurf.models.align import elements_per_alignment
from lobsurf.models.config import EncoderConfig
from lobsurf.models.kernels import (conv_dt_triton, conv_triton, ssd_last_row_triton,
                                    ssd_window_triton, triton_support)
from lobsurf.models.kernels.triton_support import use_kernels_
from lobsurf.models.mamba2 import Mamba2Block

#: the modules whose launched kernels are recorded (every module-level JITFunction of theirs)
KERNEL_MODULES = (ssd_window_triton, ssd_last_row_triton, conv_triton, conv_dt_triton,
                  c51_triton)
#: PyTorch dtype -> Triton pointer type
POINTER = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16",
           torch.int64: "*i64", torch.int32: "*i32", torch.bool: "*i1"}
#: Hopper, compute capability 9.0, 32-thread warps
TARGET = (90, 32)


@dataclasses.dataclass
class Launch:
    """One recorded launch: the kernel, its arguments by name, its compile options."""

    kernel: object
    name: str
    args: dict
    options: dict


def is_launched_kernel(name: str, value: object) -> bool:
    """Whether a module global is a kernel the wrappers launch (the jitted helpers they
    call from inside kernels are not)."""
    return type(value).__name__ == "JITFunction" and name.startswith("_") and (
        name.endswith("_kernel") or name.startswith("_ssd_window_"))


def _recorder(kernel, name: str, launches: list):
    class Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                options = {k: kwargs.pop(k) for k in ("num_warps", "num_stages")
                           if k in kwargs}
                names = list(inspect.signature(kernel.fn).parameters)
                launches.append(Launch(kernel, name, {**dict(zip(names, args)), **kwargs},
                                       options))
            return launch
    return Recorder()


def record(fn) -> list[Launch]:
    """The launches ``fn()`` makes, none of them run (module docstring)."""
    launches: list[Launch] = []
    saved = []
    for module in KERNEL_MODULES:
        for name, value in vars(module).items():
            if is_launched_kernel(name, value):
                saved.append((module, name, value))
                setattr(module, name, _recorder(value, name, launches))
    # kernels "on" takes CPU tensors only under the interpreter
    real_interpreter = triton_support.interpreter_active
    triton_support.interpreter_active = lambda: True
    try:
        fn()
    finally:
        triton_support.interpreter_active = real_interpreter
        for module, name, value in saved:
            setattr(module, name, value)
    return launches


def signature(launch: Launch) -> tuple[dict, dict, dict]:
    """Triton's signature, constexprs and argument attributes of a launch on CUDA tensors."""
    params = inspect.signature(launch.kernel.fn).parameters
    sig, consts, attrs = {}, {}, {}
    for i, (name, param) in enumerate(params.items()):
        value = launch.args[name]
        if "constexpr" in str(param.annotation):
            sig[name], consts[name] = "constexpr", value
        elif isinstance(value, torch.Tensor):
            sig[name] = POINTER[value.dtype]
            if value.data_ptr() % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool):
            sig[name] = "i1"
        elif isinstance(value, int):
            sig[name] = "i32" if -2**31 <= value < 2**31 else "i64"
            if value % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            sig[name] = "fp32"
        else:
            raise TypeError(f"{launch.name}: argument {name} of type {type(value).__name__}")
    if consts.get("BF16") == 2:
        consts["BF16"] = 1
    if "PREC" in consts:
        consts["PREC"] = "tf32"
    if "TF32" in consts:
        consts["TF32"] = True
    return sig, consts, attrs


def compile_launch(launch: Launch) -> dict:
    """Compile one launch for sm_90 (to a cubin: Triton's ptxas runs too); its constexprs,
    warps and shared memory."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    sig, consts, attrs = signature(launch)
    compiled = triton.compile(ASTSource(launch.kernel, sig, consts, attrs),
                              target=GPUTarget("cuda", *TARGET), options=launch.options)
    return {"kernel": launch.name, "warps": launch.options.get("num_warps"),
            "constexprs": {k: v for k, v in consts.items()
                           if isinstance(v, (int, str, bool))},
            "shared": compiled.metadata.shared, "cubin_bytes": len(compiled.asm["cubin"])}


def _cuda_multiple(x: torch.Tensor) -> int:
    # align.device_multiple as on CUDA: the compute dtype's elements in GEMM_ALIGN_BYTES
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else x.dtype
    return elements_per_alignment(dtype)


def block_calls() -> None:
    """A block's forward and backward (the learner's), and its forwards without autograd
    (acting, the target net), every row and the last, fp32 and bf16, z computed in the
    gated scan (the default width) or read by it (a width that is not a power of two):
    the default CUDA path's kernels ("auto" on CUDA, here "on"), with the in-projection
    padded as on CUDA."""
    real_multiple, mamba2.device_multiple = mamba2.device_multiple, _cuda_multiple
    try:
        _block_calls(EncoderConfig(), with_grad=True, last_only=(False, True))
        _block_calls(EncoderConfig(d_model=96), with_grad=False, last_only=(False,))
    finally:
        mamba2.device_multiple = real_multiple


def _block_calls(cfg: EncoderConfig, with_grad: bool, last_only: tuple[bool, ...]) -> None:
    block = use_kernels_(Mamba2Block(cfg), "on")
    for dtype in (torch.float32, torch.bfloat16):
        h = torch.randn(2, 64, cfg.d_model, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
            for last in last_only:
                if with_grad:
                    block(h, last_only=last).float().sum().backward()
                with torch.no_grad():
                    block(h, last_only=last)


def learner_calls() -> None:
    """The learner's C51 target kernel (``train.kernels``): fp32 and bf16 logits as the
    heads' aligned product leaves them (a view of wider rows), the discount a float (one
    step) and per sample (n-step returns), the terminal flags bool."""
    b, actions, atoms = 4, 11, 21
    for dtype in (torch.float32, torch.bfloat16):
        q = torch.randn(2 * b, actions * atoms + 7, dtype=dtype)[:, :actions * atoms]
        q = q.unflatten(-1, (actions, atoms))
        for gamma in (0.99, torch.rand(b)):
            c51_triton.c51_target_triton(q, torch.randn(b), torch.zeros(b, dtype=torch.bool),
                                         gamma, torch.linspace(-1.0, 1.0, atoms))


def all_calls() -> None:
    """``block_calls`` and ``learner_calls``."""
    block_calls()
    learner_calls()


def main() -> None:
    launches = record(all_calls)
    seen = set()
    for launch in launches:
        sig, consts, _ = signature(launch)
        key = (launch.name, json.dumps(sig), json.dumps(consts, default=str),
               json.dumps(launch.options))
        if key in seen:
            continue
        seen.add(key)
        print(json.dumps(compile_launch(launch)), flush=True)
    if not seen:
        sys.exit("no launch recorded")
    print(json.dumps({"defined": sorted(name for module in KERNEL_MODULES
                                        for name, value in vars(module).items()
                                        if is_launched_kernel(name, value))}))


if __name__ == "__main__":
    main()
