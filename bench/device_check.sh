#!/usr/bin/env bash
# One prepared run, on a machine with a GPU, of everything issue 31 measures there:
#
#     bash bench/device_check.sh OUT [--smoke]
#
# from the repository root. GPU time is scarce, so the whole run stays under 7 minutes: every
# part has a time limit (its budget, or what is left of DEADLINE), each part writes its JSON
# into OUT as it measures (a part cut short keeps its figures), everything is logged to
# OUT/log.txt, and a part that fails or times out never stops the next. In order:
#
#   setup        pip install -e . (no dependencies), the GPU and the versions;
#                meanwhile, in the background with 2 threads, the CPU kernels compile into
#                Numba's cache for part 5 (its figures then hold no compilation);
#   capture      gpu_capture.py: an offloading ResNet-20 step as one CUDA graph or not:
#                step times, bit-identical losses, capture warnings -> capture.json
#                (it also compiles the CUDA kernels into the cache for the parts after);
#   offload      gpu_offload.py: vDNNExt's claim on VGG-16 and ResNet-50 at 224x224 ->
#                offload.json
#   speed        gpu.py: ResNet-20 and ResNet-50 against PyTorch, and ResNet-50 in mixed
#                precision against PyTorch's AMP -> speed.json
#   capacity     gpu_capacity.py: the largest ResNet-50 batch with and without offloading
#                and recomputation, and PyTorch's -> capacity.json
#   gputests     tests/cuda's float16 and offloading tests, run on the GPU (the log);
#   cpu          concurrency.py and train.py --busy on the machine's cores, short windows ->
#                concurrency.json, train_busy.json
#
# At most 8 files come back from a device run: these 7 and nothing else go into OUT.
# --smoke runs the same parts on this machine's CPU (each GPU part's --smoke: tiny shapes,
# figures meaningless; the CPU runs at their smallest; no install): a test of the script.
#
# --cpu runs the CPU floors of train.py and conv.py on the machine's cores instead, no GPU part:
#   warm         train.py on every case, one short window: every kernel into Numba's cache,
#                on all the cores (a bare machine compiles for 1.5-2 minutes);
#   train        train.py --cases cnn resnet20, nnmem eager and graph, PyTorch in both modes
#                -> train.json
#   zoo          train.py --cases resnet56 densenet, nnmem graph and PyTorch -> zoo.json
#   busy         train.py --busy --cases cnn resnet20 -> train_busy.json
#   convstep     conv.py --in-step resnet20: each convolution pass in the step and alone
#                -> conv_step.json
#
# Both install the tbb wheel where .whl/ holds it (bench/README.md says how to fetch it): the
# GPU machine's image lists no tbb, and Numba's OpenMP layer behaves otherwise beside a busy
# process (kernels/cpu/threads.py).

set -u
OUT=${1:?usage: bash bench/device_check.sh OUT_FOLDER [--smoke | --cpu]}
SMOKE=${2:-}
cd "$(dirname "$0")/.." || exit 2
mkdir -p "$OUT" || exit 2
OUT=$(cd "$OUT" && pwd)
LOG="$OUT/log.txt"
PY=${PYTHON:-python3}
START=$SECONDS
DEADLINE=${DEVICE_CHECK_SECONDS:-450} # seconds for the whole run
# Compiled kernels outlive a part (and a rerun on the same machine), outside OUT.
export NUMBA_CACHE_DIR=${NUMBA_CACHE_DIR:-/tmp/nnmem-device-check-numba}
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" # the checkout, should the install fail
# numba-cuda 0.30 calls numpy.row_stack, which NumPy 2.5 removed: an alias for it, where missing
SHIM=$(mktemp -d)
if ! $PY -c "import numpy; numpy.row_stack" 2>/dev/null; then
    echo "import numpy; numpy.row_stack = numpy.vstack" >"$SHIM/sitecustomize.py"
    export PYTHONPATH="$SHIM:$PYTHONPATH"
fi
WARM=$(mktemp -d)

log() {
    echo "[$((SECONDS - START)) s] $*" | tee -a "$LOG"
}

# part NAME BUDGET COMMAND...: run COMMAND under a limit of BUDGET seconds (less if less is
# left before DEADLINE; skipped under 10), its output into the log.
part() {
    local name=$1 budget=$2 left rc
    shift 2
    left=$((DEADLINE - (SECONDS - START)))
    ((budget > left)) && budget=$left
    if ((budget < 10)); then
        log "SKIP $name: ${left} s left of ${DEADLINE}"
        return
    fi
    log "START $name (limit ${budget} s): $*"
    timeout -k 5 "$budget" "$@" 2>&1 | tee -a "$LOG"
    rc=${PIPESTATUS[0]}
    case $rc in
    0) log "END $name: exit 0" ;;
    124 | 137) log "END $name: TIME LIMIT after ${budget} s (its JSON keeps what it measured)" ;;
    *) log "END $name: exit $rc" ;;
    esac
}

# summary: the end of every run: the temporary folders go, every PASS/FAIL line again
summary() {
    rm -rf "$WARM" "$SHIM" "$OUT"/*.partial
    log "summary: every PASS/FAIL line above, in order"
    SUMMARY=$(grep -E '^\s*(PASS|FAIL)\b' "$LOG")
    echo "$SUMMARY" | tee -a "$LOG"
    log "done in $((SECONDS - START)) s; files: $(cd "$OUT" && ls | tr '\n' ' ')"
}

: >"$LOG"
log "device_check.sh ${SMOKE:-(GPU run)}: OUT=$OUT, deadline ${DEADLINE} s"

# -- setup ------------------------------------------------------------------------------------
if [[ $SMOKE != --smoke ]]; then
    part install 60 $PY -m pip install -q --no-deps --no-build-isolation -e .
    if compgen -G ".whl/tbb-*.whl" >/dev/null; then # (with tcmlib, which it needs)
        part tbb 30 $PY -m pip install -q --no-index --no-deps .whl/tbb-*.whl .whl/tcmlib-*.whl
    fi
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 | tee -a "$LOG"
    fi
    grep -m1 "model name" /proc/cpuinfo | tee -a "$LOG"
fi
$PY - <<'EOF' 2>&1 | tee -a "$LOG"
import importlib.metadata as m, os
for name in ("nnmem", "numba", "numba-cuda", "torch", "numpy", "tbb"):
    try:
        print(f"{name} {m.version(name)}")
    except m.PackageNotFoundError:
        print(f"{name} not installed")
print(f"cores: {len(os.sched_getaffinity(0))}")
import numba
import numpy
from nnmem.kernels.cpu import threads

threads.load_tbb()  # as nnmem does before its first parallel kernel


@numba.njit(parallel=True)
def touch(a):
    for i in numba.prange(a.size):
        a[i] = i


touch(numpy.zeros(64))
print(f"Numba's threading layer: {numba.threading_layer()}")
EOF

if [[ $SMOKE == --cpu ]]; then
    log "START warm (limit 150 s): every kernel into Numba's cache; its figures are no run's"
    timeout -k 5 150 $PY bench/train.py --cases cnn resnet20 resnet56 densenet --windows 1 \
        --seconds 0.05 --settle 0 --warmup 1 --runners nnmem_eager nnmem_graph \
        >"$WARM/warm.txt" 2>&1
    log "END warm: exit $?"
    part train 110 $PY bench/train.py --cases cnn resnet20 --windows 3 --seconds 1.5 \
        --settle 0.3 --runners nnmem_eager nnmem_graph pytorch pytorch_passive \
        --json "$OUT/train.json"
    part zoo 75 $PY bench/train.py --cases resnet56 densenet --windows 2 --seconds 1.5 \
        --settle 0.3 --runners nnmem_graph pytorch pytorch_passive --json "$OUT/zoo.json"
    part busy 75 $PY bench/train.py --busy --cases cnn resnet20 --windows 2 --seconds 1 \
        --settle 0.2 --runners nnmem_graph pytorch pytorch_passive --json "$OUT/train_busy.json"
    part convstep 60 $PY bench/conv.py --in-step resnet20 --json "$OUT/conv_step.json"
    summary
    exit 0
fi

# The CPU kernels of part 5 compile meanwhile, on 2 threads, into the same cache (timeout
# passes a TERM on to every process of the warm-up: see its end below).
NUMBA_NUM_THREADS=2 timeout 300 bash -c "
    $PY bench/train.py --cases cnn resnet20 --windows 1 --seconds 0.05 --settle 0 --warmup 1 \
        --runners nnmem_eager nnmem_graph nnmem_graph_unfused
    $PY bench/concurrency.py --windows 1 --steps 1 --batch 2 --settle 0
" >"$WARM/warm.txt" 2>&1 &
WARMING=$!

# -- the GPU parts --------------------------------------------------------------------------
if [[ $SMOKE == --smoke ]]; then
    log "SKIP capture: gpu_capture.py has no --smoke (it needs a GPU)"
    part offload 120 $PY bench/gpu_offload.py --smoke --step-seconds 0.05 --max-batch 8 \
        --steps 1 --warmup 1 --json "$OUT/offload.json"
    part speed 120 $PY bench/gpu.py --smoke --models resnet20 resnet50 --mixed resnet50 \
        --steps 1 --warmup 2 --json "$OUT/speed.json"
    part capacity 120 $PY bench/gpu_capacity.py --smoke --json "$OUT/capacity.json"
else
    # a GPU's host pool is pinned at the first offload: 8 GiB pin in seconds, 64 would not
    NNMEM_HOST_POOL_BYTES=8GiB part capture 60 $PY bench/gpu_capture.py --steps 5 \
        --json "$OUT/capture.json"
    NNMEM_HOST_POOL_BYTES=8GiB part offload 95 $PY bench/gpu_offload.py --json "$OUT/offload.json"
    part speed 75 $PY bench/gpu.py --models resnet20 resnet50 --mixed resnet50 --steps 20 \
        --warmup 3 --json "$OUT/speed.json"
    part capacity 60 $PY bench/gpu_capacity.py --json "$OUT/capacity.json"
    # the simulator's tests of float16 kernels, CUDA graphs and offloading, on the real GPU
    part gputests 60 $PY -m pytest -q -x -p no:randomly -p no:cacheprovider \
        tests/cuda/test_cuda_float16.py tests/cuda/test_offload_cuda.py
fi

# -- the CPU runs -----------------------------------------------------------------------------
for _ in $(seq 30); do # its last seconds, while the CPU runs would still have time; then it ends
    kill -0 "$WARMING" 2>/dev/null && ((SECONDS - START < DEADLINE - 100)) || break
    sleep 1
done
kill -TERM "$WARMING" 2>/dev/null
wait "$WARMING"
log "CPU kernels compiled in the background (exit $?; the end of its output):"
tail -n 3 "$WARM/warm.txt" | cut -c1-300 | tee -a "$LOG"
if [[ $SMOKE == --smoke ]]; then
    part concurrency 120 $PY bench/concurrency.py --models densenet --windows 1 --steps 1 \
        --batch 2 --settle 0 --json "$OUT/concurrency.json"
    part train 120 $PY bench/train.py --busy --cases cnn --windows 1 --seconds 0.2 \
        --settle 0 --warmup 1 --runners nnmem_graph pytorch --json "$OUT/train_busy.json"
else
    part concurrency 45 $PY bench/concurrency.py --windows 2 --steps 2 --settle 0.2 \
        --json "$OUT/concurrency.json"
    part train 75 $PY bench/train.py --busy --cases cnn resnet20 --windows 2 --seconds 0.5 \
        --settle 0.2 --runners nnmem_eager nnmem_graph pytorch pytorch_passive \
        --json "$OUT/train_busy.json"
fi

summary
