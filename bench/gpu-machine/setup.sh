# Source in the checkout's root on a lent GPU machine: source bench/gpu-machine/setup.sh
# (bench/gpu-machine/README.md). A virtualenv that sees the image's packages plus the wheels
# of ./.whl, the checkout on PYTHONPATH, numba's cache in $TMPDIR, then two checks.
scratch=${TMPDIR:-/tmp}
env_dir=${SPMMGNN_GPU_VENV:-$scratch/spmmgnn-gpu-venv}
if [[ ! -x $env_dir/bin/python ]]; then
  image_sites=$(python3 -c 'import sysconfig as s; print(s.get_path("purelib")); print(s.get_path("platlib"))')
  python3 -m venv "$env_dir" || return 1
  own_site=$("$env_dir/bin/python" -c 'import sysconfig as s; print(s.get_path("purelib"))')
  printf '%s\n' $image_sites > "$own_site/gpu-image.pth"   # the image is a venv: no --system-site-packages
  "$env_dir/bin/pip" install --quiet --no-index --no-deps .whl/*.whl || echo "setup.sh: installing .whl/ failed"
fi
if [[ ! -x $env_dir/bin/spmmgnn ]]; then
  cat > "$env_dir/bin/spmmgnn" <<SCRIPT
#!$env_dir/bin/python
import sys
from spmmgnn.cli import main
sys.exit(main())
SCRIPT
  chmod +x "$env_dir/bin/spmmgnn"
fi
export PATH=$env_dir/bin:$PATH
export LD_LIBRARY_PATH=$env_dir/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
export NUMBA_CACHE_DIR=$scratch/numba-cache PYTHONUNBUFFERED=1
python -c 'import torch, spmmgnn; print("torch", torch.__version__, "CUDA", torch.cuda.is_available(), "spmmgnn", spmmgnn.__file__)'
mpiexec -n 2 python -c 'from mpi4py import MPI; c = MPI.COMM_WORLD; print("rank", c.rank, "of", c.size)'
