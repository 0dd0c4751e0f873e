#!/usr/bin/env bash
# The GPU check on a fresh, offline machine: installs what is missing from a folder of wheels,
# then runs `zoo-benchmark gpu` (cuda tests, quick start, SlowFast-R50 step fp32/bf16 eager, its
# RGB stems as 3-D and 2-D convs, the step compiled against PyTorchVideo, the loader alone,
# real-decoding training eager and compiled, activation-checkpointing memory, and model / loader / end-to-end clips/s with GPU busy and data
# wait side by side). Every step's log goes to --out; a markdown table is printed last;
# the exit status is non-zero when a step failed.
set -u
usage() {
  cat <<'TXT'
usage: bash benchmarks/gpu_check.sh [--wheels DIR] [--out DIR] [--device cuda|cpu] [--quick]
                                    [--budget SECONDS] [--steps STEP ...]

  --wheels DIR   first install what is missing from DIR, offline:
                   pip install --no-index --find-links DIR <missing packages>
                   pip install --no-deps --no-build-isolation -e .   (zoo, this checkout)
                 (if that fails, zoo runs from this checkout through PYTHONPATH)
  --out DIR      folder for every step's log (default output/gpu_check/<date-time>)
  --device D     cuda (default) or cpu (the steps see no GPU; GPU busy is n/a)
  --quick        small sizes everywhere (a minute or two on a CPU)
  --budget S     end the whole check within S seconds: a step still running then is killed,
                 the steps not started are skipped, and the table still comes last
  --steps ...    the steps to run, in this order (the last option; default: all)

Making DIR on a machine with internet (the GPU machine's Python, here 3.12, x86-64):
  pip download av yacs pytest opencv-python-headless tensorboard matplotlib tqdm setuptools \
      --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
      --platform manylinux_2_28_x86_64 -d DIR
  pip wheel --no-deps -w DIR pytorchvideo==0.1.5 fvcore iopath    # sdists: pure Python
  pip download --no-deps -d DIR parameterized termcolor           # PyTorchVideo's needs
torch and torchvision are expected to be installed already (a CUDA build).
TXT
}
wheels="" out="" device="cuda" quick="" budget=() steps=()
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) wheels="$2"; shift 2 ;;
    --out) out="$2"; shift 2 ;;
    --device) device="$2"; shift 2 ;;
    --quick) quick="--quick"; shift ;;
    --budget) budget=(--budget "$2"); shift 2 ;;
    --steps) shift; steps=(--steps "$@"); break ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_check.sh: error: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
[ -n "$out" ] || out="output/gpu_check/$(date +%Y%m%d-%H%M%S)"
mkdir -p "$out"
if [ -n "$wheels" ]; then
  missing=""
  for pair in av:av yacs:yacs pytest:pytest cv2:opencv-python-headless setuptools:setuptools \
              tensorboard:tensorboard matplotlib:matplotlib tqdm:tqdm yaml:PyYAML \
              pytorchvideo:pytorchvideo; do
    "$PY" -c "import ${pair%%:*}" 2>/dev/null || missing="$missing ${pair#*:}"
  done
  [ -z "$missing" ] || "$PY" -m pip install --no-index --find-links "$wheels" $missing \
      >"$out/install.log" 2>&1 || { echo "gpu_check.sh: error: installing from $wheels failed" \
      "(see $out/install.log)" >&2; exit 1; }
  # Offline, pip cannot fetch a build backend for an isolated build: use the installed one.
  if "$PY" -m pip install --no-index --no-deps --no-build-isolation -e . >>"$out/install.log" 2>&1
  then
    echo "installed:${missing:- nothing missing}; zoo from $(pwd)"
  else
    export PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
    echo "installed:${missing:- nothing missing}; zoo runs from $(pwd) through PYTHONPATH"
  fi
fi
exec "$PY" -m benchmarks.run gpu --out "$out" --device "$device" $quick ${budget[@]+"${budget[@]}"} \
    ${steps[@]+"${steps[@]}"}
