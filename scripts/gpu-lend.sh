#!/usr/bin/env bash
# One GPU lend in one call (the device machine: 15 minutes, bare, no network): the FLA peers
# against our chunked forms at FlashAttention's size, and their CUDA tests. Run from the
# repository root with the wheels in .whl/ (attnbench's own, built from this commit, and the
# pure-Python packages the machine lacks: docs/speed.md, "On CUDA"). Writes under $OUT.
# The inner limits add up to 480 s (the installs take about 20 more), for timeout_s=600: the records are packed on any
# exit (the first lend of this script ran past its call's limit, and its records stayed there).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-lend}; mkdir -p "$OUT"
trap 'tar czf "$OUT/results.tgz" -C /tmp gpu-results warm 2>/dev/null; ls -la "$OUT"' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TRITON_CACHE_AUTOTUNING=1
{ nvidia-smi; python3 -c "import torch, triton, fla; print('torch', torch.__version__, 'cuda',
torch.version.cuda, 'triton', triton.__version__, 'fla', fla.__version__)"; } >"$OUT/env.txt" 2>&1
COMMON="task=throughput task.seq_len=8192 task.batch_size=2 task.n_heads=16 task.head_dim=128
 task.causal=true task.backward=true device=cuda dtype=bfloat16 task.min_run_time=0.1"
PEERS=peer_fla_linear,peer_fla_decay,peer_fla_delta_net,peer_fla_gated_delta_net,peer_fla_gla,peer_fla_mamba2
# 1. FLA's Triton kernels compiled in parallel (throwaway records), beside the peers' CUDA tests:
#    the timed sweep below finds the kernels in Triton's cache instead of compiling ~80 s each
timeout -k 10 180 attnbench -m hydra/launcher=joblib hydra.launcher.n_jobs=6 "variant=$PEERS" $COMMON \
  task.max_timing_s=1 results_dir=/tmp/warm >"$OUT/warm.log" 2>&1 &
timeout -k 10 180 python3 -m pytest -q -n 4 -p no:cacheprovider tests/variants/test_cuda.py -k peer_fla \
  >"$OUT/cuda-tests.log" 2>&1 &
wait
tail -3 "$OUT/cuda-tests.log"
# 2. timed, one job at a time: dense SDPA (the anchor), then each of ours beside its FLA peer
timeout -k 10 300 attnbench -m "variant=softmax,linear,peer_fla_linear,decay,peer_fla_decay,delta_net,peer_fla_delta_net,gated_delta_net,peer_fla_gated_delta_net,gla,peer_fla_gla,mamba2,peer_fla_mamba2" \
  $COMMON task.max_timing_s=4 results_dir=/tmp/gpu-results 2>&1 | tee "$OUT/sweep.log" | tail -25
