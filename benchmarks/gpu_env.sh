# Sourced by the issue-9 device scripts: the carried wheels into /tmp/site, the .gpu_src
# snapshot on PYTHONPATH, $OUT made, and the working folder moved into the snapshot.
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
ROOT=$(pwd)/.gpu_src
export PYTHONPATH=/tmp/site:$ROOT/src:$ROOT
OUT=${OUT:-$(pwd)/bench_out}; mkdir -p "$OUT"
cd "$ROOT" || exit 1
