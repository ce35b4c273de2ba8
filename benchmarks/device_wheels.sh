#!/usr/bin/env bash
# The wheels a lent GPU machine needs to run bpo, downloaded here into .whl/ (git-ignored through
# .git/info/exclude), for the `device` tool to carry (`carry: [".whl"]`).
#
# That machine runs Python 3.12 on x86-64, reaches no package registry, and its image already holds
# JAX (with CUDA), flax, optax, chex, numpy, scipy, matplotlib, rich, absl-py, etils, cloudpickle,
# msgpack, protobuf and typing-extensions; what bpo imports beyond those is fetched here, at the
# versions this repository's CI installs (35 MB in all; the working tree adds about 27 MB, under the
# tool's 64 MiB a call). Left out, since training and the benchmarks do not import them: gymnax,
# rliable, submitit, and MuJoCo's rendering needs (PyOpenGL, websockets; glfw stays, Gymnasium's
# MuJoCo environments import it when built).
#
#   bash benchmarks/device_wheels.sh
#
# and each device command starts with (docs/backends.md, "On a lent GPU machine"):
#
#   python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#     --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit;
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo '/.whl/' >> .git/info/exclude
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64; do
  platforms+=(--platform "$p")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  "${platforms[@]}" -d .whl \
  mujoco==3.17.0 mujoco-mjx==3.17.0 glfw==2.11.0 trimesh==5.2.0 \
  gymnasium==1.3.0 farama-notifications==0.0.6 \
  tyro==1.0.17 docstring-parser==0.18.0 typeguard==4.6.1 shtab==1.8.0 \
  tensorboardx==2.6.5
ls .whl
du -sh .whl
