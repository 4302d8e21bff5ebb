"""What fabric's confirmations cost: the same fabric run on three test hosts with one host's link slowed
and with none slowed, side by side in one invocation, each run's pass and confirmations timed from its
rows (docs/clusters.md, "Confirmation").

    sudo python scripts/bench_confirm.py [--runs 2] [--serial]

The test hosts are network namespaces (tests/netns.py: root, iproute2), two ranks each, h1's link
limited to 100 Mbit/s by tc tbf in the slowed case; the ranks run at a real-time priority as in the
tests. A run's pass is its rows up to the last of the pass's own (phase concurrent or serial); its
confirmations are the rows after that (phase recheck), timed from the pass's last row to their last
(``elapsed_s``). Printed per case: the pass's time, the confirmations' time and their share of the pass,
the confirmations run, what the run named and what it reported as transient. Exit status 1 when a run
failed or named something other than h1 where h1 was slowed (nothing where nothing was).
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.netns import NetnsCluster, realtime_refused, start_ranks, unavailable_reason, wait_all  # noqa: E402

ARGS = ["fabric", "--size", "512K", "--iters", "6", "--timeout", "60"]
CASES = (("h1 slowed", True), ("nothing slowed", False))


def one_run(slowed: bool, serial: bool, workdir: Path) -> dict:
    cluster = NetnsCluster(3).create()
    try:
        if slowed:
            cluster.slow(1, "100mbit")
        json_path = workdir / f"fabric-{'slowed' if slowed else 'clean'}.json"
        args = [*ARGS, *(["--serial"] if serial else []), "--json", str(json_path),
                "--csv", str(workdir / "fabric.csv")]
        results = wait_all(start_ranks(cluster, 2, args), timeout=600)
    finally:
        cluster.teardown()
    codes = [code for code, _, _ in results]
    if any(code != 0 for code in codes):
        return {"failed": f"exit statuses {codes}: {results[0][2][-500:]}"}
    payload = json.loads(json_path.read_text())
    rows = payload["rows"]
    first = [row["elapsed_s"] for row in rows if row["phase"] != "recheck"]
    again = [row["elapsed_s"] for row in rows if row["phase"] == "recheck"]
    notes = [line for line in results[0][1].splitlines() if line.startswith("note: confirmation ")]
    fabric = payload["fabric"]
    return {"pass_s": max(first), "confirm_s": max(again) - max(first) if again else 0.0,
            "confirmations": len(notes), "named": [suspect["name"] for suspect in fabric["suspects"]],
            "transient": [item["name"] for item in fabric["transient"]]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2, help="runs of each case, alternating")
    parser.add_argument("--serial", action="store_true", help="fabric --serial (one pair at a time)")
    args = parser.parse_args()
    reason = unavailable_reason() or realtime_refused()
    if reason is not None:
        print(f"bench_confirm: {reason}", file=sys.stderr)
        return 2
    failed = False
    print(f"{'case':<16}{'pass s':>8}{'confirm s':>11}{'share':>8}  confirmations, named, transient")
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.runs):
            for name, slowed in CASES:
                found = one_run(slowed, args.serial, Path(workdir))
                if "failed" in found:
                    print(f"{name:<16}failed: {found['failed']}")
                    failed = True
                    continue
                share = found["confirm_s"] / found["pass_s"]
                named, transient = found["named"] or "nobody", found["transient"] or "none"
                print(f"{name:<16}{found['pass_s']:>8.1f}{found['confirm_s']:>11.1f}{share:>8.0%}  "
                      f"{found['confirmations']}, {named}, {transient}")
                failed |= found["named"] != (["h1"] if slowed else [])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
