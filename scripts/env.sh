# Sourced by the other scripts: make .venv (once) and install spartan-py into it with the
# extras named in $SPARTAN_EXTRAS. Reinstalls only when pyproject.toml changes.
set -euo pipefail
unset PYTHONDONTWRITEBYTECODE  # keep what the first import compiles (see --no-compile below)
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
pip_job=""
if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv" >&2
    # the venv's own pip (5 s) is installed beside the packages, which this Python's pip
    # installs meanwhile (--python); the two share no file
    "$python" -m venv --without-pip "$venv"
    "$venv/bin/python" -m ensurepip --default-pip >/dev/null 2>&1 &
    pip_job=$!
fi
extras="${SPARTAN_EXTRAS:-}"
stamp="$venv/.installed-$(sha1sum "$root/pyproject.toml" | cut -c1-12)-${extras:-base}"
if [ ! -f "$stamp" ]; then
    echo "installing spartan-py${extras:+[$extras]} into $venv (first run only)" >&2
    # --no-compile: byte-compiling every installed module took half the install (37 s against 74 s
    # on the 2-core machine); a module is compiled when first imported instead, and kept
    "$python" -m pip --python "$venv/bin/python" install --quiet --no-compile -e "$root${extras:+[$extras]}"
    # Numba's kernels compiled now, one group per process, the groups at once: the quickstart's,
    # and with the test extras every other kernel (else each test worker compiles its own)
    echo "compiling the CPU kernels (first run only)" >&2
    groups="cpu generated${extras:+ rest}"
    compile_jobs=()
    for group in $groups; do
        "$venv/bin/python" -m spartan_py.compile_cache "$group" &
        compile_jobs+=($!)
    done
    wait "${compile_jobs[@]}"
    touch "$stamp"
fi
if [ -n "$pip_job" ]; then wait "$pip_job" || echo "note: $venv has no pip of its own ($python -m ensurepip failed)" >&2; fi
export PATH="$venv/bin:$PATH"
