"""Name the machine in the header of every packed record that predates the field (issue 53).

    .venv/bin/python experiments/claims/label_machines.py [--records experiments/records]

Each header gains the labels packing writes now (:func:`claimslib.records.machine_labels`), derived
from its own hardware fields only: a point's ``machine``, a baseline's ``task_machines`` (or ``machine``):
the kind of machine (name and CPU kernel flags; "CPU flags not recorded" where a CPU record lacks them),
"<kind>, noted, not recorded" where the hardware was noted after the run, "not recorded" where there is none.
No example line changes. Rerunning it changes nothing.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from claimslib.records import SUFFIX, label_machines

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=Path, default=HERE.parent / "records",
                        help="records root (default: %(default)s)")
    args = parser.parse_args(argv)
    changed = [p for p in sorted(args.records.glob(f"*/*{SUFFIX}")) if label_machines(p)]
    for path in changed:
        print(f"labelled {path}")
    print(f"{len(changed)} record(s) labelled")
    return 0


if __name__ == "__main__":
    sys.exit(main())
