#!/usr/bin/env bash
# One GPU lend in one call (the device machine: 15 minutes, bare, no network). Run from the
# repository root with the wheels in .whl/ (scripts/gpu-wheels.sh builds them: attnbench's own,
# from this commit, and the pure-Python packages the machine lacks), `carry: [".whl"]`,
# timeout_s=600. Writes under $OUT:
# env.txt, sweep.log, cuda-tests.log and results-PART.tgz (the new records, to copy into
# results/reference-gpu/runs, and every log, packed on any exit).
#   1. (in parallel, at most 3 min) FLA's Triton kernels compiled by throw-away jobs (alone, each
#      compiles in 1-2 min; beside a loaded host they did not finish in 3½), and the CUDA tests
#      that need no FLA kernel;
#   2. (alone, at most 5 min) `sweep=gpu` beside the committed records of results/reference-gpu:
#      a job with a current record there (an earlier lend's) is not run again, so lends add up;
#   3. (1 min) the FLA peers' CUDA tests, their kernels compiled by then.
# `scripts/gpu-lend.sh sweep [SECONDS]` runs part 2 alone, for SECONDS (default 240): a second
# call on the still-warm machine (within its 30 s idle release; the wheels installed by the
# first), for the sweep's jobs left over; give it timeout_s = SECONDS + 30 and no more than the
# lend has left, or the call is killed at its limit and its records stay there.
# Each pytest stops a test at 150 s (pytest-timeout) rather than losing its report to the call's
# limit. The inner limits add up to 550 s (their grace periods included; the installs take about
# 20 more), for a call's timeout_s=600: a call killed at its limit runs no exit trap, and its
# records would stay on the machine.
set -uo pipefail
PART=${1:-all}
OUT=${OUT:-/tmp/gpu-lend}; LOGS=/tmp/lend-logs; mkdir -p "$OUT" "$LOGS"
# the sweep's folder: the committed records copied in (a job with a current one is not run
# again), outside the checkout, which the next call's copy of the working tree replaces
BOARD=/tmp/gpu-results; mkdir -p "$BOARD/runs"; cp -n results/reference-gpu/runs/*.json "$BOARD/runs/"
touch /tmp/lend-start
trap 'kill $CLOCKS 2>/dev/null; find "$BOARD/runs" -newer /tmp/lend-start -name "*.json" \
  -printf "runs/%P\n" >/tmp/new-records; tar czf "$OUT/results-$PART.tgz" -C "$BOARD" \
  -T /tmp/new-records -C /tmp lend-logs warm 2>/dev/null; ls -la "$OUT"' EXIT
CLOCKS=""
[ "$PART" = sweep ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site PATH=/tmp/site/bin:$PATH PYTHONUNBUFFERED=1 TRITON_CACHE_AUTOTUNING=1
{ nvidia-smi; nproc; uptime; python3 -c "import torch, triton, fla, attnbench; print('torch',
torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'fla', fla.__version__,
'attnbench', attnbench.__file__)"; } >"$OUT/env.txt" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu \
  --format=csv -lms 1000 >>"$LOGS/clocks.csv" 2>&1 &
CLOCKS=$!
SIZE="task=throughput task.seq_len=8192 task.batch_size=2 task.n_heads=16 task.head_dim=128
 task.causal=true task.backward=true device=cuda dtype=bfloat16 task.min_run_time=0.1"
FLA=peer_fla_linear,peer_fla_decay,peer_fla_delta_net,peer_fla_gated_delta_net,peer_fla_gla,peer_fla_mamba2
TESTS="tests/variants/test_cuda.py tests/harness/test_memory.py tests/variants/test_blocksparse.py
 tests/harness/test_preflight.py tests/tasks/test_throughput.py::test_cuda_graph_timing_replays_both_calls_and_says_so"
PYTEST="python3 -m pytest -o addopts= -v -rfEs --tb=short -p no:cacheprovider --timeout=150"
# sweep=gpu timed alone, one job at a time, the most needed first, for $1 seconds at most
sweep() {
  timeout -k 5 "$1" attnbench -m sweep=gpu device=cuda dtype=bfloat16 results_dir=$BOARD \
    2>&1 | tee "$OUT/sweep.log" | grep -E "jobs done|failed|Error" | tail -8
}
if [ "$PART" = sweep ]; then
  sweep "${2:-240}"
  exit
fi
# 1. FLA's kernels compiled, beside the tests that need none of them
timeout -k 5 175 attnbench -m hydra/launcher=joblib hydra.launcher.n_jobs=6 "variant=$FLA" $SIZE \
  task.max_timing_s=0.5 results_dir=/tmp/warm >"$LOGS/warm.log" 2>&1 &
pids=($!)
timeout -k 5 175 $PYTEST -n 6 -k "not peer_fla" $TESTS >"$OUT/cuda-tests.log" 2>&1 &
pids+=($!)
wait "${pids[@]}"
tail -3 "$OUT/cuda-tests.log"
# 2. the sweep (conf/sweep/gpu.yaml)
sweep 300
# 3. the FLA peers' tests
timeout -k 5 60 $PYTEST -n 4 -k "peer_fla" $TESTS >"$LOGS/cuda-tests-fla.log" 2>&1
tail -3 "$LOGS/cuda-tests-fla.log"
