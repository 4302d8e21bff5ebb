#!/usr/bin/env bash
# mutation.sh [MODULE.py ...]: do the fast tests fail when the code is wrong?
#
# mutmut (pip install -e '.[mutation]') rewrites each listed module (default: pyproject's
# [tool.mutmut] only_mutate: the measurement, statistics, gate, outlier, sizes and busbw-factor modules
# and the diagnose and explain engines) into mutants, one small change each, and runs the fast loop's
# tests that reach the changed function against each (`-m "not processes"`: a mutant judged by
# multi-process runs would take minutes). Then scripts/mutation_table.py prints, per module, of all its
# mutants: killed, survived, not reached by a fast test, listed as equivalent in
# tests/equivalent_mutants.yaml; PASS when at least 90% are killed and the rest are listed.
#
# One module at a time (mutmut is CPU-heavy): MUTATION_CHILDREN (default 2) tests run at once. Each
# listed module is judged afresh: mutmut keeps a mutant's result and which tests reach each function in
# mutants/ (git ignores it) and would not run a new test against a function that did not change, nor a
# survivor again, so both are cleared first. Exit status: mutation_table.py's (1: a module below its
# target).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
"$PY" -c 'import mutmut' 2>/dev/null || { echo "mutation.sh: mutmut is not installed: pip install -e '.[mutation]'" >&2; exit 2; }
if [ $# -gt 0 ]; then modules=("$@"); else
    mapfile -t modules < <("$PY" -c 'import sys; sys.path.insert(0, "scripts"); import mutation_table
print("\n".join(mutation_table.listed_modules()))')
fi
rm -f mutants/mutmut-stats.json
for module in "${modules[@]}"; do
    rm -f "mutants/$module.meta"
    name=${module%.py}; name=${name//\//.}
    echo "== mutmut: $module"
    # mutmut prints a progress line many times a second: keep its last lines only
    "$PY" -m mutmut run --max-children "${MUTATION_CHILDREN:-2}" "$name.*" 2>&1 | tr '\r' '\n' | tail -n 4
done
"$PY" scripts/mutation_table.py ${MUTATION_SHOW:+--show} "${modules[@]}"
