#!/usr/bin/env bash
# The wheels scripts/gpu-lend.sh carries to the GPU machine (it reaches no package index; its
# image has torch, Triton, numpy, pandas, pyarrow, jinja2, tqdm, scipy, joblib, cloudpickle,
# einops, PyYAML, pytest, pytest-xdist and pytest-timeout). Pure-Python wheels of what attnbench
# and its peers need beyond that, and attnbench's own from this checkout (uncommitted edits
# included: commit first for records that name their commit), into .whl/ (git ignores it through
# info/exclude; about 12 MB, within a lend's 64 MiB carry).
#   scripts/gpu-wheels.sh [PYTHON]    (PYTHON: a python with pip; default python3)
set -euo pipefail
PY=${1:-python3}
cd "$(git rev-parse --show-toplevel)"
EXCLUDE=$(git rev-parse --git-path info/exclude)  # .git may be a file (a worktree)
grep -qx "/.whl/" "$EXCLUDE" 2>/dev/null || { mkdir -p "$(dirname "$EXCLUDE")"; echo "/.whl/" >>"$EXCLUDE"; }
rm -rf .whl && mkdir .whl
"$PY" -m pip wheel -q --no-deps -w .whl \
  hydra-core==1.3.8 omegaconf==2.3.1 antlr4-python3-runtime==4.9.3 plotly==7.1.0 \
  hydra-joblib-launcher==1.2.0 hydra-submitit-launcher==1.2.0 submitit==1.5.4 \
  fla-core==0.6.0 local-attention==1.11.2 performer-pytorch==1.1.4 \
  axial_positional_embedding==0.3.12 hyper-connections==0.4.11 torch-einops-utils==0.2.0
"$PY" -m pip wheel -q --no-deps -w .whl .
ls .whl && du -sh .whl
