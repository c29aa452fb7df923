#!/usr/bin/env bash
# The README's first command: set up, then run the main job (GPU if present, else CPU).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$root"
spartan infer --network generated:1024 --inputs generated:60000 --layers 120 --backend auto "$@"
