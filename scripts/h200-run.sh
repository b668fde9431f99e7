#!/usr/bin/env bash
# Runs on the lent H200 machine (see ../shared/GPU.md), from the project root:
#   source .gl/on-device.sh; bash scripts/h200-run.sh [quick|bench|tests|all]
# Carried: .gl (loader, glvnd, validation layer .debs, cuda_baseline.py),
# and .h200/ (vkhost built with --features vkhost-cli/cuda, and the test binaries, stripped, from
# scripts/h200-prepare.sh). Writes logs, JSON and SVG under $OUT.
set -uo pipefail
what=${1:-all}
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
export RUST_BACKTRACE=1
v=./.h200/vkhost
[ -x "$v" ] || v=./target/release/vkhost
echo "== $(date -u +%FT%TZ) on $(hostname); nvidia-smi:"; nvidia-smi --query-gpu=name,driver_version,pcie.link.gen.current,pcie.link.width.current --format=csv,noheader
$v devices 2>&1 | tee "$OUT/devices.txt"
if [ "$what" = tests ] || [ "$what" = all ]; then
  for t in .h200/tests/*; do
    echo "== test $(basename "$t")"
    VK_LAYER_ENABLES=VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT "$t" --test-threads "${TEST_THREADS:-2}" 2>&1 | tail -n 25 | tee -a "$OUT/tests.txt"
  done
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  echo "== vkhost bench --baseline cuda"
  $v bench --baseline cuda --json "$OUT/bench.json" --plot "$OUT/bench.svg" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.txt"
  echo "== cuda_baseline.py (same command)"
  PYTHONUNBUFFERED=1 python3 .gl/cuda_baseline.py --sizes 4K,64K,1M,16M,256M,1G 2>&1 | tee "$OUT/cuda_baseline.txt" | tail -n 20
fi
if [ "$what" = check ] || [ "$what" = all ]; then
  echo "== vkhost check --all (no validation layer unless carried)"
  $v check --all 2>&1 | tee "$OUT/check.txt"
fi
if [ "$what" = experiments ] || [ "$what" = all ]; then
  echo "== latency: sync copies on the compute queue instead of the copy engines"
  VKHOST_COPY_QUEUE=compute $v bench --sizes 4K,64K,1M,16M,256M --paths pinned --dirs h2d,d2h --no-costs 2>&1 | tee "$OUT/exp-compute-queue.txt" | grep -E "pinned|small"
  echo "== registered memory with MADV_HUGEPAGE"
  $v bench --sizes 16M,256M,1G --paths registered --dirs h2d,d2h --no-costs --hugepages 2>&1 | tee "$OUT/exp-hugepages.txt" | grep -E "registered"
  echo "== bidir queue pairs"
  $v bench --sizes 256M,1G --paths pinned --dirs bidir --no-costs --bidir-queues copy-copy,compute-copy,copy-compute,compute-compute --json "$OUT/bidir-pairs.json" 2>&1 | tee "$OUT/exp-bidir.txt" | grep -E "bidir"
fi
if [ "$what" = quick ]; then
  $v bench --quick --baseline cuda 2>&1 | tee "$OUT/bench-quick.txt"
fi
