"""Check the quick start's results: python .ci/check_quickstart.py OUTPUT_BASE MIN_TOP1.

OUTPUT_BASE is the run's CONFIG.LOG.BASE_PATH; its one experiment folder must hold a validation
line in metrics.jsonl with top-1 >= MIN_TOP1 (the last one counts) and tools/test_ddp.py's
test_metrics.json. Prints both figures; exits 1 when either is missing or too low.
"""

import glob
import json
import os
import sys


def main() -> int:
    base, bar = sys.argv[1], float(sys.argv[2])
    runs = sorted(glob.glob(os.path.join(base, "*", "metrics.jsonl")))
    if len(runs) != 1:
        print(f"ci: expected one run with metrics.jsonl under {base}, found {len(runs)}")
        return 1
    folder = os.path.dirname(runs[0])
    with open(runs[0]) as f:
        val = [json.loads(line) for line in f if '"split": "val"' in line]
    test_file = os.path.join(folder, "test_metrics.json")
    test = json.load(open(test_file)) if os.path.exists(test_file) else None
    top1 = val[-1]["top1"] if val else float("nan")
    test_top1 = test["top1"] if test else float("nan")
    print(f"ci: quick start: val top-1 {top1:.1f}% after {len(val)} validations; test top-1 "
          f"{test_top1:.1f}% over {test and test['num_videos']} videos")
    ok = bool(val) and top1 >= bar and test is not None and test["top1"] >= bar
    if not ok:
        print(f"ci: the quick start must reach {bar:g}% top-1 in validation and test")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
