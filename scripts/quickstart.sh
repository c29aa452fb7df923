#!/usr/bin/env bash
# The README's first command: set up, then run the main job, experiments/quickstart.yaml
# (GPU if present, else CPU), and write its report into runs/quickstart/.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$root"
spartan run experiments/quickstart.yaml --out runs/quickstart --report "$@"
