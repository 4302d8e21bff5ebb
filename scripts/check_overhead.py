"""How much --check adds to a sweep's wall time: the same sweep with and without it, alternated so both
see the same machine, printed as a ratio (absolute times on shared machines are noise).

    python scripts/check_overhead.py [--nproc 2] [--rounds 2] [-- extra commbench options]
"""

import argparse
import subprocess
import sys
import tempfile
import time

SWEEP = ["--collective", "all", "--dtype", "float32,bfloat16", "--sizes", "1K:4M:x16", "--iters", "10",
         "--warmup", "2", "--quiet"]


def wall_seconds(args: list[str], output_dir: str) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "commbench", *args, "--output-dir", output_dir], check=True,
                   stdin=subprocess.DEVNULL)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("extra", nargs="*")
    options = parser.parse_args()
    base = [*SWEEP, "--nproc", str(options.nproc), *options.extra]
    plain, checked = [], []
    with tempfile.TemporaryDirectory() as output_dir:
        for _ in range(options.rounds):
            plain.append(wall_seconds(base, output_dir))
            checked.append(wall_seconds([*base, "--check"], output_dir))
    ratio = min(checked) / min(plain)
    print(f"--check / plain wall time (best of {options.rounds}): {ratio:.2f}")


if __name__ == "__main__":
    main()
