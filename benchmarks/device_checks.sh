#!/usr/bin/env bash
# The checks a GPU machine of 16 cores runs in one call (results under $OUT): the CUDA tests, then
# strata.lossy on 1..16 threads against an earlier source tree (benchmarks/lossy_threads_quick.py),
# then checkpointing on the GPU and the segment codec on 1..16 threads (benchmarks/checkpoint_gpu.py),
# then SDP4Bit's fused kernels against PyTorch's ops and a GPU training step with and without them
# (benchmarks/comm_quant_throughput.py --device cuda, benchmarks/sdp4bit_gpu_step.py).
# Inputs, carried beside the checkout:
#   DATA  folder of raw fields (default .devdata)     BASE  src folder of the earlier tree (default .devbase/src)
#   BASE_LABEL  its name in the tables (default: base)  FIELDS, THREADS  the fields and thread counts timed
#   PARTS  which of cuda,lossy,checkpoint,comm to run (default all; lossy, checkpoint and comm take up to 400, 300
#          and 200 s: one call of at most 600 s runs cuda,lossy, cuda,checkpoint or cuda,comm, or checkpoint,comm)
# Made here before the call (both ignored through .git/info/exclude, named in the call's carry):
#   mkdir -p .devdata .devbase && cp ../shared/data/sci/{ns3d192,ns3d_vx,era5_t2m}_* ../shared/data/zoo/{das_silixa,cosmo}_* .devdata/
#   git archive REV src | tar -x -C .devbase
set -o pipefail
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD/src"
OUT=${OUT:-/tmp/device_out}; DATA=${DATA:-.devdata}; BASE=${BASE:-.devbase/src}; BASE_LABEL=${BASE_LABEL:-base}
FIELDS=${FIELDS:-ns3d192,era5_t2m,cosmo}; THREADS=${THREADS:-1,16}; PARTS=${PARTS:-cuda,lossy,checkpoint,comm}
mkdir -p "$OUT"
{ nvidia-smi -L; nproc; python3 -c "import sys, numpy, numba, torch; print(sys.version.split()[0], numpy.__version__, numba.__version__, torch.__version__, torch.cuda.is_available())"; } > "$OUT/env.txt" 2>&1
if [[ ,$PARTS, == *,cuda,* ]]; then
    timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_comm_cuda.py tests/test_checkpoint_cuda.py \
        tests/test_comm_kernels.py 2>&1 \
        | tee "$OUT/cuda_tests.log" | tail -3
fi
if [[ ,$PARTS, == *,lossy,* ]]; then
    # one process per tree (lossy_threads.py's worker per version and round, each compiling, outlasted a call)
    for tree in "src:this" "$BASE:$BASE_LABEL"; do
        PYTHONPATH="${tree%%:*}" timeout 200 python3 benchmarks/lossy_threads_quick.py --data "$DATA" --fields "$FIELDS" \
            --threads "$THREADS" --label "${tree##*:}" | tee -a "$OUT/lossy_threads.txt"
    done
    python3 benchmarks/lossy_threads_quick.py --table "$OUT/lossy_threads.txt" --out "$OUT/lossy_threads.md" > /dev/null
fi
if [[ ,$PARTS, == *,checkpoint,* ]]; then
    TMPDIR=${TMPDIR:-/tmp} timeout 300 python3 benchmarks/checkpoint_gpu.py --out "$OUT" 2>&1 | tail -40
fi
if [[ ,$PARTS, == *,comm,* ]]; then
    timeout 80 python3 benchmarks/comm_quant_throughput.py --device cuda --numel 268435456 --out "$OUT" 2>&1 | tail -8
    timeout 120 python3 benchmarks/sdp4bit_gpu_step.py --out "$OUT" 2>&1 | tail -30
fi
