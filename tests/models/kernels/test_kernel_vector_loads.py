"""The kernels read the in-projection's slices with vector loads, compiled for Hopper
(sm_90) without a GPU.

Triton specializes an integer argument only when it is a multiple of 16; the slice's row
stride is 648 bf16 at the default model (a multiple of 8: 16 bytes), so unless the wrapper
passes the strides in units of their alignment every load of it is a scalar 16-bit load,
several times slower (benchmarks/RESULTS.md, Defaults decided by measurement). The conv's
row-walking kernels (its forward, conv_dt's backward) give each thread BC / (32 x warps)
adjacent channels, so their widest load is that many bf16 at once. The CPU interpreter
cannot show this, so the kernels are compiled here to PTX by Triton's own compiler, in a
subprocess without TRITON_INTERPRET (the tests set it), with the divisibility
Triton would give the default call's arguments. The gated scan (``ssd_window_gated``) reads
z, a view of the same in-projection, the same way. Planted (``row_alignment`` returning 1),
every test fails.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip("triton", reason="compiling a kernel needs Triton (dev extra on Linux)")

#: a compile for sm_90 in a subprocess each, as test_kernels_compile.py's: the full suite
pytestmark = pytest.mark.slow

#: in the subprocess: the wrapper's own arguments for the default layout (B 2, K 64, the
#: 648-wide in_proj output sliced at column 256 for 384 channels), each integer marked
#: divisible by 16 where it is (Triton's launch-time rule), compiled for sm_90; prints the
#: PTX's global load instructions by kind
SCRIPT = textwrap.dedent("""
    import inspect, json, re, sys
    from collections import Counter
    import torch
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from lobsurf.models.kernels import conv_triton as ct

    proj = torch.zeros(2, 64, 648, dtype=torch.bfloat16)
    x = proj[..., 256:640]
    dout = torch.zeros(2, 64, 384, dtype=torch.bfloat16)
    align = ct.row_alignment(x)
    which = sys.argv[1]
    out_row = dout.stride(1)
    extra_fp32 = ()
    ints = dict(L=64, C=384, s_b=x.stride(0) // align, s_l=x.stride(1) // align,
                s_db=dout.stride(0), s_dl=out_row, s_pb=dout.stride(0), s_pl=out_row,
                s_ob=dout.stride(0), s_ol=out_row)
    if which in ("gated", "zproj"):  # the scan forward with the gate: z a view of the
        # in-projection, or (zproj) computed from u [B, 64, 128] and wz [256, 128]
        from lobsurf.models.kernels import ssd_window_triton as sw

        z = torch.zeros(2, 64, 128, dtype=torch.bfloat16) if which == "zproj" else proj[..., :256]
        align = ct.row_alignment(z)
        ints = dict(L=64, H=4, s_b=64 * 384, s_l=384, s_dtb=256, s_dtl=4, s_yb=64 * 256,
                    s_yl=256, s_zb=z.stride(0) // align, s_zl=z.stride(1) // align,
                    s_ssb=256, s_ssl=4)
        zproj = 128 if which == "zproj" else 0
        consts = dict(E=256, N=64, P=64, Q=64, GATED=1, ZALIGN=align,
                      ZPROJ=zproj, ZK=min(zproj, sw.Z_PROJ_COLUMNS), BF16=1, PREC="ieee")
        fn, warps = sw._ssd_window_fwd, sw.WARPS_FWD
        extra_fp32 = ("dt_ptr", "a_ptr", "d_ptr", "w_ptr", "ss_ptr")
    elif which in ("dx", "dx_small"):  # conv_dt_triton's backward: [B, 64, 392] GEMM
        # output and gradient, at its channel block from SMALL_BATCH windows up and below
        from lobsurf.models.kernels import conv_dt_triton as cdt

        xbcdt = torch.zeros(2, 64, 392, dtype=torch.bfloat16)
        align = ct.row_alignment(xbcdt)
        ints = dict(L=64, C=384, H=4, CP=392, s_b=xbcdt.stride(0) // align,
                    s_l=xbcdt.stride(1) // align, s_db=dout.stride(0), s_dl=out_row,
                    s_tb=256, s_tl=4, s_xb=xbcdt.stride(0) // align,
                    s_xl=xbcdt.stride(1) // align)
        block = cdt.BLOCK_C_SMALL if which == "dx_small" else cdt.BLOCK_C
        consts = dict(W=4, BC=block, LT=64, PT=16, ALIGN=align, R=cdt.ROWS_PER_STEP,
                      STAGES_=cdt.STAGES, THRESHOLD=cdt.SOFTPLUS_THRESHOLD)
        fn, warps = cdt._conv_dt_bwd_kernel, cdt.WARPS
    else:  # "walk": the conv's forward, its row walk (FWD_WALK_ROWS rows a step)
        consts = dict(W=4, BC=ct.FWD_WALK_BLOCK_C, ALIGN=align, R=ct.FWD_WALK_ROWS,
                      STAGES_=ct.FWD_WALK_STAGES)
        fn, warps = ct._conv_walk_fwd_kernel, ct.FWD_WALK_WARPS
    sig, attrs = {}, {}
    for i, name in enumerate(inspect.signature(fn.fn).parameters):
        if name in consts:
            sig[name] = "constexpr"
        elif name.endswith("_ptr"):
            fp32 = ("part_ptr", "part_dt_ptr", "ddt_ptr", "dt_bias_ptr") + extra_fp32
            sig[name] = "*fp32" if name in fp32 else "*bf16"
            attrs[(i,)] = [["tt.divisibility", 16]]  # torch's allocations: 16-byte aligned
        else:
            sig[name] = "i32"
            if ints[name] % 16 == 0:
                attrs[(i,)] = [["tt.divisibility", 16]]
    compiled = triton.compile(ASTSource(fn, sig, consts, attrs),
                              target=GPUTarget("cuda", 90, 32),
                              options={"num_warps": warps})
    ptx = compiled.asm["ptx"]
    kinds = Counter(re.findall(r"ld\\.global[.a-z0-9]*", ptx))
    # a pipelined loop's loads are asynchronous copies: counted by their bytes
    kinds.update(f"cp.async {int(n, 16)} bytes"
                 for n in re.findall(r"cp\\.async\\.c[ag]\\.shared\\.global[^,]*,[^,]*, (0x[0-9a-f]+)",
                                     ptx))
    print(json.dumps(dict(kinds)))
""")


#: PTX's global load of n adjacent bytes
LOAD_OF_BYTES = {2: "ld.global.b16", 4: "ld.global.b32", 8: "ld.global.v2.b32",
                 16: "ld.global.v4.b32"}


def _global_loads(which: str) -> dict[str, int]:
    # the PTX's global loads by kind, of the kernel ``which`` names (SCRIPT)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_DEFAULT_FP_FUSION"] = "1"  # Triton 3.9 warns without it; 1 = its default
    done = subprocess.run([sys.executable, "-c", SCRIPT, which], capture_output=True,
                          text=True, env=env, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("which", ["dx", "dx_small"])
def test_dx_kernel_loads_the_rows_a_thread_run_at_a_time(which: str) -> None:
    # conv_dt_triton's backward (the learner's conv + dt): its row loop's loads of x and d
    # out are pipelined copies of a thread's whole run of channels (4 bf16: 8 bytes at 128
    # channels a program, 2 bf16 at the small batches' 64), as are the loads before the
    # loop; only the dt tile's loads (4 of 16 columns) are scalar
    from lobsurf.models.kernels import conv_dt_triton as cdt

    block = cdt.BLOCK_C_SMALL if which == "dx_small" else cdt.BLOCK_C
    run_bytes = 2 * block // (32 * cdt.WARPS)
    loads = _global_loads(which)
    copies = {k for k in loads if k.startswith("cp.async")}
    assert copies == {f"cp.async {run_bytes} bytes"}, loads
    assert loads[LOAD_OF_BYTES[run_bytes]] >= 8, loads  # 3 x rows, 4 taps, the bias


def test_forward_walk_loads_the_rows_a_thread_run_at_a_time() -> None:
    # the conv's forward, a row walk: its row loop's loads of x are pipelined copies
    # of a thread's whole run of channels (4 bf16: 8 bytes); the taps and the bias before
    # the loop are plain loads of the same width; nothing scalar
    from lobsurf.models.kernels import conv_triton as ct

    run_bytes = 2 * ct.FWD_WALK_BLOCK_C // (32 * ct.FWD_WALK_WARPS)
    loads = _global_loads("walk")
    copies = {k for k in loads if k.startswith("cp.async")}
    assert copies == {f"cp.async {run_bytes} bytes"}, loads
    assert set(loads) - copies == {LOAD_OF_BYTES[run_bytes]}, loads


def test_gated_scan_loads_z_from_the_in_projection_16_bytes_at_a_time() -> None:
    # ssd_window_gated: z is a view of the 648-wide in-projection; its strides
    # passed in units of 8 elements, its loads are 16-byte vectors as are x, B and C's (a
    # thread's 8 bf16 of a row), none a scalar 16-bit load
    loads = _global_loads("gated")
    assert LOAD_OF_BYTES[2] not in loads and loads[LOAD_OF_BYTES[16]] >= 16, loads


def test_projected_gate_loads_u_and_its_weights_16_bytes_at_a_time() -> None:
    # ssd_window_gated_projected: u's rows and W_z's are loaded (or copied
    # into shared memory by the pipelined product) 16 bytes at a time, nothing scalar
    loads = _global_loads("zproj")
    assert LOAD_OF_BYTES[2] not in loads, loads
    assert loads.get(LOAD_OF_BYTES[16], 0) + loads.get("cp.async 16 bytes", 0) >= 16, loads
