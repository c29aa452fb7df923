# Sourced by the other scripts: make .venv (once) and install spartan-py into it with the
# extras named in $SPARTAN_EXTRAS. Reinstalls only when pyproject.toml changes.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
python="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
    echo "creating $venv" >&2
    "$python" -m venv "$venv"
fi
extras="${SPARTAN_EXTRAS:-}"
stamp="$venv/.installed-$(sha1sum "$root/pyproject.toml" | cut -c1-12)-${extras:-base}"
if [ ! -f "$stamp" ]; then
    echo "installing spartan-py${extras:+[$extras]} into $venv (first run only)" >&2
    # --no-compile: byte-compiling every installed module took half the install (37 s against 74 s
    # on the 2-core machine); a module is compiled when first imported instead, and kept
    "$venv/bin/python" -m pip install --quiet --no-compile -e "$root${extras:+[$extras]}"
    touch "$stamp"
fi
export PATH="$venv/bin:$PATH"
unset PYTHONDONTWRITEBYTECODE  # keep what the first import compiles (see --no-compile above)
