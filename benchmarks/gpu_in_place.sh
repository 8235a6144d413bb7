# Sourced by the issue-9 device scripts that run the carried working tree in place: the
# carried wheels into /tmp/site, the tree's src/ on PYTHONPATH, and the details folder
# $OUT=$SCRATCH (the device tool brings back at most 8 files, so the scripts archive it into
# $FINAL, the tool's $OUT).
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$(pwd)/src:$(pwd)
FINAL=${OUT:-$(pwd)/bench_out}; OUT=${SCRATCH:?set SCRATCH before sourcing}
mkdir -p "$OUT" "$FINAL"
