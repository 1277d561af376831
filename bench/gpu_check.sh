#!/usr/bin/env bash
# The one check to run on a lent GPU machine (one NVIDIA H100/H200, 16 cores, no network),
# in the project's root, in one call of under 10 minutes; everything it makes lands in $OUT:
#
#   env.txt          the GPU, torch, Triton and CUDA versions seen
#   pytest-gpu.log   pytest -m gpu of the fused kernels and of the device-memory model
#                    (GPU_CHECK_ALL=1: every -m gpu test, which takes longer)
#   gpu-bench.log    bench/gpu.py's progress; gpu.json and gpu.md its results
#
# Before the call, here (with network), in the project's root:
#   bash bench/gpu-machine/wheels.sh            # MPI wheels into .whl/ (git-ignored)
# and name .whl in the call's carry. Then, there:  bash bench/gpu_check.sh
# A dry run on any machine: GPU_CHECK_DEVICE=cpu bash bench/gpu_check.sh (small graphs).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/gpu-check-out}
mkdir -p "$OUT"
DEVICE=${GPU_CHECK_DEVICE:-cuda}
TMP=${TMPDIR:-/tmp}
export NUMBA_CACHE_DIR=$TMP/numba-cache PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}

# the image's python3 (CUDA torch, Triton) in a venv that sees its packages, plus the MPI
# wheels (as ../shared/gpu-machine/env.sh does; ../shared does not travel with the tree)
PY=python3
if [[ $DEVICE == cuda ]]; then
  V=$TMP/spmmgnn-gpu-venv
  if [[ ! -x $V/bin/python ]]; then
    sps=$(python3 -c "import sysconfig as s; print(s.get_paths()['purelib']); print(s.get_paths()['platlib'])")
    python3 -m venv "$V"
    printf '%s\n' $sps > "$("$V/bin/python" -c "import sysconfig as s; print(s.get_paths()['purelib'])")/image.pth"
    if ls .whl/*.whl > /dev/null 2>&1; then
      "$V/bin/pip" install -q --no-index --no-deps .whl/*.whl || echo "wheel install failed"
    fi
  fi
  export PATH=$V/bin:$PATH LD_LIBRARY_PATH=$V/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  PY=python
elif [[ -x .venv/bin/python ]]; then
  PY=.venv/bin/python
  export PATH=$PWD/.venv/bin:$PATH
fi

{
  date -u
  nvidia-smi 2>&1 | head -15
  $PY -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda, torch.cuda.is_available() and torch.cuda.get_device_name(0))"
  $PY -c "import triton; print('triton', triton.__version__)" 2>&1
  command -v mpiexec || echo "no mpiexec: the P = 2 and CPU steps of bench/gpu.py fail (carry .whl)"
  nproc --all
} > "$OUT/env.txt" 2>&1

tests=(tests/backend/test_fused_dropout.py tests/training/test_device_memory.py)
[[ ${GPU_CHECK_ALL:-0} == 1 ]] && tests=(tests)
mark="gpu"
[[ $DEVICE == cpu ]] && mark="not gpu and not mpi"
limits=(200 360)                 # seconds: pytest, bench (one call stays under 10 minutes)
[[ $DEVICE == cpu ]] && limits=(1200 2400)   # the dry run on a small shared CPU
timeout "${limits[0]}" $PY -m pytest -q -rfE -p no:cacheprovider -m "$mark" "${tests[@]}" \
  > "$OUT/pytest-gpu.log" 2>&1
echo "pytest exit $?" >> "$OUT/pytest-gpu.log"

bench=(--out "$OUT/gpu.json" --search-seconds "${GPU_CHECK_SEARCH:-90}")
[[ $DEVICE == cpu ]] && bench=(--device cpu --quick --out "$OUT/gpu.json" --search-seconds 0)
timeout "${limits[1]}" $PY -m bench.gpu "${bench[@]}" > "$OUT/gpu-bench.log" 2>&1
echo "bench exit $?" >> "$OUT/gpu-bench.log"
tail -n 3 "$OUT/pytest-gpu.log" "$OUT/gpu-bench.log"
