#!/usr/bin/env bash
# Issue 9 device call: which compiled pieces the step's generically named Inductor kernels
# (triton_poi_fused_0, triton_per_fused_1, ...: no aten origin to name them by) belong to.
# Runs graph_timeline.py at ROW with a fresh Inductor cache, then prints each generic kernel's
# "Source Nodes / Original ATen" header and body from the generated wrappers; then
# eager_kernel_sources.py at the same shape.
# DUMP=1 also brings back every generated Python file (wrappers and kernels) as
# inductor_py.tgz, to read what each kernel loads and stores offline.
# Usage (device machine, repo root, .whl carried): ROW=1024:2 bash benchmarks/generic_kernels.sh
set -u
SCRATCH=/tmp/generic_out; source "$(dirname "$0")/gpu_in_place.sh"
IFS=: read -r b l <<< "${ROW:-1024:2}"
export TORCHINDUCTOR_CACHE_DIR=/tmp/generic_cache
rm -rf "$TORCHINDUCTOR_CACHE_DIR"
timeout "${LIMIT:-200}" python3 benchmarks/graph_timeline.py --batch "$b" --layers "$l" \
  --top "${TOP:-12}" > "$OUT/timeline.log" 2> "$OUT/timeline.err"
echo "timeline rc=$?"
python3 - "$TORCHINDUCTOR_CACHE_DIR" > "$OUT/generic.log" <<'PY'
import pathlib, re, sys
root = pathlib.Path(sys.argv[1])
pat = re.compile(r"^(triton_(?:poi|per|red)_fused_\d+) = async_compile\.triton\(", re.M)
for f in sorted(root.rglob("*.py")):
    text = f.read_text(errors="replace")
    for m in pat.finditer(text):
        head = text[:m.start()].splitlines()[-6:]
        body_end = text.find("''', device_str", m.end())
        body = text[m.end():body_end].splitlines()
        print("=" * 30, f.name, m.group(1))
        print("\n".join(h for h in head if h.startswith("#")))
        print("\n".join(x for x in body if "tl.load" in x or "tl.store" in x or "def " in x
                        or "xnumel =" in x or "rnumel =" in x or "r0_numel =" in x)[:3000])
PY
grep -c "^=====" "$OUT/generic.log"
timeout "${LIMIT:-200}" python3 benchmarks/eager_kernel_sources.py --batch "$b" --layers "$l" \
  > "$OUT/eager.log" 2> "$OUT/eager.err"
echo "eager rc=$?"; head -40 "$OUT/eager.log" | cut -c1-260; tail -3 "$OUT/eager.err"
if [ "${DUMP:-0}" = 1 ]; then
  (cd "$TORCHINDUCTOR_CACHE_DIR" \
    && find . -name "*.py" -print0 | tar czf "$FINAL/inductor_py.tgz" --null -T -)
  ls -la "$FINAL/inductor_py.tgz"
fi
cd "$OUT" && tar czf "$FINAL/logs.tgz" ./*
