#!/usr/bin/env bash
# The README's second command: set up, then run the test suite (GPU tests skip without a GPU).
set -euo pipefail
SPARTAN_EXTRAS=test source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$root"
python -m pytest "$@"
