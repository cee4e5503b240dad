"""Regenerate the RNG-order golden traces under golden/ from the reference.

    python scripts/regen_golden.py            # rewrite every golden/<case>.json
    python scripts/regen_golden.py --check    # only report which files would change

Run it on purpose only: when the RNG contract (DESIGN.md section 6), the model math or the
random weights change. Review `git diff golden/` before committing: the golden files are the
regression check that fails (property_tests/test_golden.py, naming the first differing event)
when the order of RNG draws changes. The cases are defined in property_tests/golden_cases.py;
each file is oracle.rng_trace.save_events() of the reference block run, which must equal the
loop run's events (checked here before writing).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oracle.reference_backend import ReferenceBackend  # noqa: E402
from oracle.rng_trace import first_difference, load_events, save_events  # noqa: E402
from property_tests.golden_cases import CASES, GOLDEN_DIR, path, run_events  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="report differences, write nothing")
    args = ap.parse_args(argv)
    ref = ReferenceBackend()
    GOLDEN_DIR.mkdir(exist_ok=True)
    changed = 0
    for name in CASES:
        block, loop = run_events(ref, name, "block"), run_events(ref, name, "loop")
        diff = first_difference(block, loop)
        if diff:
            print(f"{name}: block and loop rounds disagree ({diff}); not writing", file=sys.stderr)
            return 1
        old = load_events(path(name)) if path(name).exists() else None
        diff = "new file" if old is None else first_difference(old, block)
        purposes = sorted({e.purpose for e in block})
        if diff:
            changed += 1
        if diff and not args.check:
            save_events(path(name), block)
        print(
            f"{name}: {len(block)} events ({', '.join(purposes)})"
            + (f" - {'would change' if args.check else 'written'}: {diff}" if diff else " - unchanged")
        )
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
