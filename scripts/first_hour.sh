#!/usr/bin/env bash
# scripts/first_hour.sh [NAME ...]: a newcomer's first hour, walked by a script. Runs the commands
# README and the docs give a new user (Quick start, compare, plot and report, a shipped sweep, list, a
# pattern, replay's laptop example, fabric's one-machine example, the help pages) with COLUMNS=100 and
# their output piped, as a CI log or `| grep` sees it, then checks every output with
# scripts/first_hour_check.py: no traceback, no table, table title or header line over 100 columns, no
# cut heading or cell, no run-table row without an interval, exit status 0. Prints each command and what
# it found; exits 1 on any problem. NAME runs only those steps (the names below); minutes in all on a
# laptop. Run from a checkout with commbench installed; files go to a temporary directory, kept when a
# problem is found.
set -u
if ! command -v commbench > /dev/null; then
    echo "first hour: commbench is not on PATH: activate the environment it is installed in" >&2
    exit 2
fi
cd "$(dirname "$0")/.."
checkout=$(pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/first-hour.XXXXXX")
export COLUMNS=100
cd "$work"

wanted=" $* "
outputs=()
step() {  # step NAME COMMAND...: run it (when wanted) with its output in NAME.out
    local name=$1
    shift
    if [ -n "${wanted// /}" ] && [[ "$wanted" != *" $name "* ]]; then
        return
    fi
    echo "running $name: $*" >&2
    { echo "\$ $*"; "$@" < /dev/null 2>&1; echo "exit $?"; } > "$work/$name.out"
    outputs+=("$work/$name.out")
}

# Quick start (README)
step default commbench --output-dir runs
step every-collective commbench --collective all --sizes 4K,1M --output-dir runs
step both-modes commbench --collective all_gather_base --mode both --check --output-dir runs
step dtypes-ops commbench --dtype bfloat16 --op sum,max --placement both --output-dir runs
step sweep commbench sweep smoke --output-dir runs
step list commbench list
step fsdp commbench pattern fsdp --model tiny --output-dir runs
step tp commbench pattern tp --model tiny --output-dir runs
# compare, plot and report: two runs of passes, as README says the gate wants them
step repeat-a commbench --sizes 1K:64K --repeat 3 --output-dir A
step repeat-b commbench --sizes 1K:64K --repeat 3 --output-dir B
step compare commbench compare A B
step plot commbench plot A B --output busbw.png
step report commbench report A B --output report.html
# replay's laptop example (docs/replay.md)
step record torchrun --standalone --nproc_per_node 2 "$checkout/scripts/record_example.py" OUT
step replay-ddp commbench replay OUT/ddp --select last:1 --output-dir runs
step replay-fsdp2 commbench replay OUT/fsdp2 --select last:1 --check --output-dir runs
# fabric's one-machine example (docs/clusters.md)
step fabric commbench fabric --output-dir runs
# what --help shows
step help commbench --help
step sweep-help commbench sweep --help
step pattern-help commbench pattern --help

if [ "${#outputs[@]}" -eq 0 ]; then
    echo "first hour: no step named ${*}" >&2
    exit 2
fi
if python "$checkout/scripts/first_hour_check.py" "${outputs[@]}"; then
    rm -rf "$work"
else
    status=$?
    echo "outputs kept in $work"
    exit "$status"
fi
