#!/usr/bin/env bash
# Hunt flaky tests: run a pytest selection RUNS times beside BUSY busy loops (processes spinning on the
# cores, as a loaded CI runner's neighbours do), then print every test that failed and how often.
#
#   scripts/flake_hunt.sh                              # tests that start processes, 3 runs, 2 busy loops
#   scripts/flake_hunt.sh --runs 20 --busy 2 -- tests/test_fabric_netns.py -k slowed
#   scripts/flake_hunt.sh --runs 50 -- tests/test_torchrun_options.py -k go_before_it
#   scripts/flake_hunt.sh --runs 10 --busy 0 -- tests/test_parity.py   # an idle machine too
#
# Hunt idle as well as busy: an idle machine has noise of its own. On this project's virtual machine,
# idle, about half of a 4 KiB gloo op's samples came ~4 ms (one scheduler tick) after the rest, likely
# a sleeping core woken late; beside busy loops, which keep the cores awake, they did not.
#
# Everything after `--` goes to pytest (default: -m processes). Exit status 0 when every run passed,
# 1 when any test failed in any run, 2 on bad arguments. The busy loops and every pytest run end when
# the script does, on success, failure or Ctrl-C. The log of every run that failed is kept (its path is
# printed), so each failure's traceback can be read after the hunt.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=3 busy=2
while [ $# -gt 0 ]; do
    case $1 in
        --runs) runs=${2:-}; shift 2 ;;
        --busy) busy=${2:-}; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "flake_hunt: unknown argument $1 (--runs N, --busy K, -- PYTEST_ARGS)" >&2; exit 2 ;;
    esac
done
case $runs in ''|*[!0-9]*|0) echo "flake_hunt: --runs takes a whole number above 0, not '$runs'" >&2; exit 2 ;; esac
case $busy in ''|*[!0-9]*) echo "flake_hunt: --busy takes a whole number, not '$busy'" >&2; exit 2 ;; esac
[ $# -gt 0 ] || set -- -m processes
python=${PYTHON:-python}

workdir=$(mktemp -d)
kept=""  # where the logs of failed runs are kept, made at the first failure
loops=()
cleanup() {
    for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null; done
    [ -n "${pytest_pid:-}" ] && kill -- -"$pytest_pid" 2>/dev/null
    wait 2>/dev/null
    rm -rf "$workdir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for _ in $(seq 1 "$busy"); do
    ( while :; do :; done ) &
    loops+=($!)
done

echo "flake hunt: $runs run(s) of pytest $* beside $busy busy loop(s)"
started=$SECONDS
for run in $(seq 1 "$runs"); do
    log="$workdir/run-$run.log"
    run_started=$SECONDS
    # its own process group, so that an interrupted run's ranks go with it; SIGINT at its default, as in
    # a foreground run (a command this script starts with & would start with SIGINT ignored, and the
    # tests of what Ctrl-C does would see a process that ignores it)
    setsid "$python" -c 'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL)
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])' -m pytest -q -p no:cacheprovider -rf "$@" \
        >"$log" 2>&1 &
    pytest_pid=$!
    wait "$pytest_pid"
    code=$?
    pytest_pid=
    found=$(grep -E '^(FAILED|ERROR) ' "$log" | sed -E 's/^(FAILED|ERROR) ([^ ]+).*/\2/')
    if [ -n "$found" ]; then
        echo "$found" >>"$workdir/failures"
    elif [ "$code" -ne 0 ]; then  # no test named: pytest itself failed (exit 5: no tests collected)
        echo "(pytest exit $code: no test named)" >>"$workdir/failures"
    fi
    summary=$(grep -E "(passed|failed|error|deselected|no tests ran).* in [0-9.]+s" "$log" | tail -n 1)
    echo "run $run: exit $code in $((SECONDS - run_started)) s, load $(cut -d' ' -f1-3 /proc/loadavg): $summary"
    if [ "$code" -ne 0 ] && [ -z "$found" ]; then
        tail -n 20 "$log"
    fi
    if [ "$code" -ne 0 ]; then
        kept=${kept:-$(mktemp -d "${TMPDIR:-/tmp}/flake_hunt.XXXXXX")}
        cp "$log" "$kept/"
        grep -E '^(FAILED|ERROR) ' "$log" | cut -c1-300 | sed 's/^/    /'
        echo "    log: $kept/run-$run.log"
    fi
done

echo "flake hunt: $runs run(s) in $((SECONDS - started)) s"
if [ -s "$workdir/failures" ]; then
    echo "failed (runs out of $runs, test):"
    sort "$workdir/failures" | uniq -c | sort -rn
    exit 1
fi
echo "no test failed"
