#!/usr/bin/env bash
# The README's second command: set up, then run the fast test suite (GPU tests skip without
# a GPU). Arguments go to pytest: `-m slow` runs the slow tests instead (nvcc builds,
# calibration recovery, the wheel, the browser, Dask clusters), `-m ''` everything.
set -euo pipefail
SPARTAN_EXTRAS="${SPARTAN_EXTRAS:-test}"  # CI asks for dev (test, lint, docs), a superset
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$root"
workers=$(python -c 'import os; print(min(8, len(os.sched_getaffinity(0))))')
python -m pytest -m "not slow" -n "$workers" "$@"
