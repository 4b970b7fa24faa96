#!/usr/bin/env bash
# Regenerate results/reference, the committed reference board, as the round's single
# regeneration does it (docs/leaderboard.md, "The reference board"): sweep=standard and
# sweep=recall_state from a clean clone of this commit, installed as a user gets it, in three parts:
#
#   scripts/regenerate-reference.sh quality   # both presets' training grids, two jobs at a time (~9½ h)
#   scripts/regenerate-reference.sh timings   # throughput and decode, alone on a quiet machine
#   scripts/regenerate-reference.sh finish    # the records into results/reference, collected
#
# Each part can be stopped and run again: it skips every job that has a record. The records go
# to results/regeneration/runs in this checkout, so that a part's progress can be committed and a
# later session (a fresh machine) goes on from it: the clone is moved to this commit first, and a
# job whose code changed runs again (its identity holds its modules' digests). A job's identity
# also names the machine (CPU model and capability), so a regeneration is one host's: on another
# host every job runs again, and the other host's records stay in results/regeneration as history.
# `finish` keeps only this host's records of the code it collects for. WORK (default
# ../attnbench-regen) holds the clone, its environment and the logs; VARIANTS narrows a part to
# some variants (VARIANTS=softmax,linear), TASKS the quality part to some tasks
# (TASKS=icl_regression).
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$(pwd)
WORK=${WORK:-$REPO/../attnbench-regen}
PART=${1:-}
# the quality tasks of each preset (the timings are standard's)
STANDARD=copy,noisy_recall,compression,icl_regression,concentration,lm
RECALL_STATE=recall,forgetting_recall,parity

case "$PART" in
  quality | timings | finish) ;;
  *)
    echo "usage: scripts/regenerate-reference.sh quality|timings|finish (see its first lines)" >&2
    exit 2
    ;;
esac

IFS=, read -ra NAMES <<<"${TASKS:-}"
for task in "${NAMES[@]}"; do
  case ",$STANDARD,$RECALL_STATE," in
    *",$task,"*) ;;
    *)
      echo "regenerate-reference: TASKS names '$task', which neither preset's quality grids hold;" \
        "use names from $STANDARD,$RECALL_STATE." >&2
      exit 2
      ;;
  esac
done

COMMIT=$(git rev-parse HEAD)
RECORDS=$REPO/results/regeneration
if [ "$PART" != finish ]; then
  if [ ! -d "$WORK/attnbench" ]; then
    mkdir -p "$WORK"
    git clone -q "$REPO" "$WORK/attnbench"
    git -C "$WORK/attnbench" checkout -q "$COMMIT"
    python3 -m venv "$WORK/.venv"
    "$WORK/.venv/bin/pip" install -q torch==2.13.0 "$WORK/attnbench[peers]"
  fi
  CLONED=$(git -C "$WORK/attnbench" rev-parse HEAD)
  if [ "$CLONED" != "$COMMIT" ]; then
    echo "regenerate-reference: moving $WORK/attnbench from ${CLONED:0:8} to ${COMMIT:0:8}" \
      "(jobs whose code changed run again)" >&2
    git -C "$WORK/attnbench" fetch -q "$REPO" "$COMMIT"
    git -C "$WORK/attnbench" checkout -q "$COMMIT"
    "$WORK/.venv/bin/pip" install -q --force-reinstall --no-deps "$WORK/attnbench[peers]"
  fi
  TASKS=${TASKS:-$STANDARD,$RECALL_STATE}
  NARROW=()
  [ -n "${VARIANTS:-}" ] && NARROW=("variant=$VARIANTS")
  cd "$WORK/attnbench"
  # the tasks of TASKS that a preset's grids hold ("a,b" ∩ "b,c" → "b")
  within() { comm -12 <(tr , '\n' <<<"$1" | sort -u) <(tr , '\n' <<<"$2" | sort -u) | paste -sd, -; }
  if [ "$PART" = timings ]; then
    RUNS=("standard throughput,decode")
  else
    RUNS=("standard $(within "$TASKS" "$STANDARD")" "recall_state $(within "$TASKS" "$RECALL_STATE")")
  fi
  for run in "${RUNS[@]}"; do
    read -r preset tasks <<<"$run"
    [ -z "$tasks" ] && continue
    # a failed sweep ends the script with its status (set -e, pipefail)
    "$WORK/.venv/bin/attnbench" -m "sweep=$preset" "task=$tasks" "${NARROW[@]}" \
      "results_dir=$RECORDS" "hydra.sweep.dir=$WORK/hydra/$PART-$preset" 2>&1 | tee -a "$WORK/$PART.log"
  done
  exit 0
fi

# finish: this host's new records replace the old ones (git keeps those), then one collection
HOST=$("$WORK/.venv/bin/python" -c "import torch
from attnbench.harness.jobs.env import device_name
print(device_name(torch.device('cpu')))")
mapfile -t new < <("$WORK/.venv/bin/python" - "$RECORDS/runs" "$HOST" <<'PY'
import json, pathlib, sys
folder, host = pathlib.Path(sys.argv[1]), sys.argv[2]
for path in sorted(folder.glob("*.json")):
    if json.loads(path.read_text()).get("hardware") == host:
        print(path)
PY
)
if [ ${#new[@]} -eq 0 ]; then
  echo "regenerate-reference: no records of this host ($HOST) in $RECORDS/runs; run the" \
    "quality and timings parts first." >&2
  exit 2
fi
rm -f results/reference/runs/*.json
cp "${new[@]}" results/reference/runs/
"$WORK/.venv/bin/attnbench-collect" --drop-missing results/reference  # the code that ran
# records of code that changed while the parts ran: history in $WORK, not on the board
"$WORK/.venv/bin/python" - <<'PY'
import pathlib, pandas as pd
table = pd.read_parquet("results/reference/results.parquet", columns=["run_id", "current"])
old = sorted(set(table.loc[~table["current"].astype(bool), "run_id"]))
for run_id in old:
    for path in pathlib.Path("results/reference/runs").glob(f"{run_id}*.json"):
        path.unlink()
print(f"{len(old)} records of older code left out")
PY
"$WORK/.venv/bin/attnbench-collect" --drop-missing results/reference
echo "results/reference: the records of $RECORDS from $HOST for this code; build the board" \
  "with attnbench-leaderboard results/reference, then commit results/reference."
