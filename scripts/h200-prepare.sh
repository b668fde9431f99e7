#!/usr/bin/env bash
# Here, before a run on the H200: build the CLI with the CUDA baseline and collect the test
# binaries into the git-ignored .h200/ so they travel (`carry`).
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
grep -qx '/.h200/' .git/info/exclude || echo '/.h200/' >> .git/info/exclude
# The device tests run with the validation layer: carry its package beside the loader's.
[ -d .gl ] || { echo "run ../shared/gpu/prepare.sh first (fills .gl)"; exit 1; }
ls .gl/vulkan-validationlayers_*.deb >/dev/null 2>&1 || (cd .gl && apt-get download vulkan-validationlayers)
cargo build --release --features vkhost-cli/cuda
rm -rf .h200 && mkdir -p .h200/tests
cargo test --release -p vkhost --no-run --message-format=json 2>/dev/null \
  | python3 scripts/test-bins | cut -f2 | while read -r f; do cp "$f" ".h200/tests/$(basename "$f" | sed "s/-[0-9a-f]*$//")"; done
# The fault-injection sweep and the unwind tests are a separate build (feature `fault-injection`).
cargo test --release -p vkhost --features fault-injection --test fault --test unwind --test unwind_sweep --no-run --message-format=json 2>/dev/null \
  | python3 scripts/test-bins | cut -f2 | while read -r f; do cp "$f" ".h200/tests/$(basename "$f" | sed "s/-[0-9a-f]*$//")"; done
cp target/release/vkhost .h200/vkhost
# The minimal program the bench is checked against (docs/PERFORMANCE.md).
ex="bidir_time d2d_queues plain_copy sync_floor host_read_barrier bar_cost big_register register_cost pinned_small queue_latency split_copy mid_split assist_rounds sync_bidir alloc_cost write_assist"
cargo build --release -p vkhost $(for e in $ex; do printf -- '--example %s ' "$e"; done)
for e in $ex; do cp "target/release/examples/$e" .h200/; done
# The standalone probe (nothing of vkhost's), for h200-run.sh's host check.
if [ -d ../shared/vkprobe ]; then
  CARGO_TARGET_DIR=target/vkprobe cargo build --release --manifest-path ../shared/vkprobe/Cargo.toml
  cp target/vkprobe/release/vkprobe .h200/vkprobe && strip .h200/vkprobe
fi
strip .h200/vkhost .h200/tests/* $(for e in $ex; do printf '.h200/%s ' "$e"; done)
# Compressed: the working tree that travels is limited to 64 MiB; h200-run.sh unpacks it.
tar -C .h200 -cJf .h200/tests.tar.xz tests && rm -rf .h200/tests
ls -la .h200; du -sh .h200
