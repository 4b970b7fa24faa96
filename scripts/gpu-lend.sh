#!/usr/bin/env bash
# One GPU lend in one call (the device machine: 15 minutes, bare, no network). Run from the
# repository root with the wheels in .whl/ (attnbench's own, built from this commit, and the
# pure-Python packages the machine lacks: docs/speed.md, "On CUDA"). Writes under $OUT:
# env.txt, sweep.log, cuda-tests.log and results.tgz (every record and log, packed on any exit).
#   1. (in parallel, about 3½ min) FLA's Triton kernels compiled by throw-away jobs; every CUDA
#      test of the suite; delta_net timed eagerly and replayed while that load runs (the drift
#      of a launch-bound loop); MQAR's step time per mixer at Zoology's largest setting (sizing);
#   2. (alone, 5 min) `sweep=gpu`: SDPA, ours eager and replayed as CUDA graphs, FLA's kernels.
# The inner limits add up to 550 s, for a call's timeout_s=600: a call killed at its limit runs
# no exit trap, and its records would stay on the machine.
set -uo pipefail
OUT=${OUT:-/tmp/gpu-lend}; LOGS=/tmp/lend-logs; mkdir -p "$OUT" "$LOGS"
trap 'tar czf "$OUT/results.tgz" -C /tmp gpu-results gpu-loaded mqar warm lend-logs 2>/dev/null; ls -la "$OUT"' EXIT
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TRITON_CACHE_AUTOTUNING=1
{ nvidia-smi; nproc; uptime; python3 -c "import torch, triton, fla, attnbench; print('torch',
torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'fla', fla.__version__,
'attnbench', attnbench.__file__)"; } >"$OUT/env.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
  --format=csv -lms 1000 >"$LOGS/clocks.csv" 2>&1 &
SIZE="task=throughput task.seq_len=8192 task.batch_size=2 task.n_heads=16 task.head_dim=128
 task.causal=true task.backward=true device=cuda dtype=bfloat16 task.min_run_time=0.1"
FLA=peer_fla_linear,peer_fla_decay,peer_fla_delta_net,peer_fla_gated_delta_net,peer_fla_gla,peer_fla_mamba2
# 1. FLA's kernels compiled in parallel (throw-away records): the timed sweep then finds them in
#    Triton's cache instead of compiling about a minute each
timeout -k 5 205 attnbench -m hydra/launcher=joblib hydra.launcher.n_jobs=6 "variant=$FLA" $SIZE \
  task.max_timing_s=0.5 results_dir=/tmp/warm >"$LOGS/warm.log" 2>&1 &
pids=($!)
timeout -k 5 205 python3 -m pytest -o addopts="" -v -rA -n 8 -p no:cacheprovider \
  --junitxml="$LOGS/cuda-tests.xml" tests/variants/test_cuda.py tests/harness/test_memory.py \
  tests/variants/test_blocksparse.py tests/harness/test_preflight.py \
  tests/tasks/test_throughput.py::test_cuda_graph_timing_replays_both_calls_and_says_so \
  >"$OUT/cuda-tests.log" 2>&1 &
pids+=($!)
timeout -k 5 205 attnbench -m variant=delta_net task.cuda_graph=false,true $SIZE task.max_timing_s=2 \
  results_dir=/tmp/gpu-loaded >"$LOGS/loaded.log" 2>&1 &
pids+=($!)
timeout -k 5 205 attnbench -m variant=softmax,linear,delta_net,gated_delta_net,gla,mamba2 task=recall \
  task.seq_len=512 task.n_kv_pairs=64 task.min_kv_pairs=64 task.tokens_per_pair=8 task.test_doublings=0 \
  task.vocab_size=8192 task.train_size=20000 task.test_size=1000 task.val_size=1000 task.steps=300 \
  task.batch_size=64 task.d_model=128 task.random_filler=false device=cuda dtype=bfloat16 \
  results_dir=/tmp/mqar >"$LOGS/mqar.log" 2>&1 &
pids+=($!)
wait "${pids[@]}"
tail -4 "$OUT/cuda-tests.log"
# 2. timed alone, one job at a time, the most needed first (conf/sweep/gpu.yaml)
timeout -k 5 300 attnbench -m sweep=gpu device=cuda dtype=bfloat16 results_dir=/tmp/gpu-results \
  2>&1 | tee "$OUT/sweep.log" | grep -E "jobs done|failed|Error" | tail -8
