"""Start-up cost of the command line: `modforge list` vs `python -c "import torch"`.

Both are run as fresh processes, interleaved, 5 timed runs each after a warm-up; the
ratio of medians is what we track (target ≤ 1.3×: listing every registered part may
cost little more than importing torch itself).

    python benchmarks/startup.py [--runs 5] [--write]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from _report import alternate, median, publish  # noqa: E402

TARGET = 1.3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--write", action="store_true", help="record the figures in benchmarks/README.md")
    ns = parser.parse_args()
    python = sys.executable
    commands = {
        "import torch": [python, "-c", "import torch"],
        "modforge list": [python, "-m", "modforge", "list"],
    }
    times = alternate(commands, ns.runs)
    base, ours = median(times["import torch"]), median(times["modforge list"])
    ratio = ours / base
    verdict = "meets" if ratio <= TARGET else "misses"
    table = (
        "| command | median (s) | runs |\n|---|---|---|\n"
        + "".join(f"| `{name}` | {median(t):.3f} | {len(t)} |\n" for name, t in times.items())
        + f"\n**Ratio `modforge list` / `import torch`: {ratio:.2f}×** ({verdict} the ≤ {TARGET}× target)\n"
    )
    return publish("startup", table, ns.write)


if __name__ == "__main__":
    sys.exit(main())
