"""Are two runs' results the same? Every label file byte for byte, and every score.

    python benchmarks/compare_runs.py OUTPUT_A OUTPUT_B

Compares, between two output folders of ``lsd-dask run`` (or ``demo``'s ``results``):

- every label file under ``tpl-*/anat/`` (GIFTI, CIFTI, look-up tables, sidecars) and
  every ``work/labels/*.npy``, byte for byte;
- every score row of ``report.json`` (``scores``) and the blur choices
  (``feature_blur``), value for value.

Timings, run ids, stamps and paths are not compared. Exits 1 and lists what differs when
anything does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    args = parser.parse_args(argv)
    problems: list[str] = []
    n_files = 0
    for pattern in ("tpl-*/anat/*", "work/labels/*.npy"):
        names_a = {p.relative_to(args.a).as_posix() for p in args.a.glob(pattern)}
        names_b = {p.relative_to(args.b).as_posix() for p in args.b.glob(pattern)}
        for name in sorted(names_a ^ names_b):
            problems.append(f"{name} is in one run only")
        for name in sorted(names_a & names_b):
            n_files += 1
            if (args.a / name).read_bytes() != (args.b / name).read_bytes():
                problems.append(f"{name} differs")
    reports = [json.loads((d / "report.json").read_text()) for d in (args.a, args.b)]
    rows = [{(r["method"], r["k"]): r for r in rep["scores"]} for rep in reports]
    if rows[0].keys() != rows[1].keys():
        problems.append(f"score rows differ: {sorted(rows[0].keys() ^ rows[1].keys())}")
    n_scores = 0
    for key in sorted(rows[0].keys() & rows[1].keys()):
        for name in sorted(rows[0][key].keys() | rows[1][key].keys()):
            n_scores += 1
            va, vb = rows[0][key].get(name), rows[1][key].get(name)
            if not _same(va, vb):
                problems.append(f"score {key[0]} K={key[1]} {name}: {va} != {vb}")
    blur = [rep.get("feature_blur") for rep in reports]
    if not _same(blur[0], blur[1]):
        problems.append(f"feature_blur differs: {blur[0]} != {blur[1]}")
    print(f"{n_files} label files and {n_scores} scores compared; {len(problems)} differ")
    for line in problems:
        print("  " + line)
    return 1 if problems else 0


def _same(a: Any, b: Any) -> bool:
    """Equal as JSON values (NaN equals NaN: a null score on both sides is the same)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


if __name__ == "__main__":
    sys.exit(main())
