#!/usr/bin/env bash
# Fetch the wheels a lent GPU machine lacks (bench/gpu-machine/README.md) into ./.whl.
# Run in the checkout's root on a machine with network; the GPU machine's Python is 3.12.
set -euo pipefail
mkdir -p .whl
exclude=.git/info/exclude
if [[ -d .git ]] && ! grep -qx '/.whl/' "$exclude" 2>/dev/null; then
  echo '/.whl/' >> "$exclude"
fi
platforms=()
for tag in manylinux_2_28 manylinux_2_27 manylinux_2_24 manylinux_2_17 manylinux2014 \
           manylinux_2_5 manylinux1; do
  platforms+=(--platform "${tag}_x86_64")
done
python3 -m pip download --dest .whl --no-deps --only-binary=:all: \
  --implementation cp --python-version 3.12 "${platforms[@]}" \
  mpich==5.0.2 mpi4py==4.1.2 pymetis==2025.2.2 kaminpar==3.7.3
ls -l .whl
