"""How long finding the BOLD files of a large fMRIPrep tree takes: lsd-dask's reader
(``lsd_dask.io.bids_index``) against pybids' ``BIDSLayout``, on a fake tree.

    python benchmarks/bids_index.py [--subjects 1000] [--pybids]

The tree has, per subject, ``sub-XXXX/func/`` with a CIFTI BOLD file, a hemi-L and hemi-R
GIFTI pair on fsaverage5, an MNI-space NIfTI, a brain mask and the confounds TSV and JSON,
as fMRIPrep writes them (7 files, empty but for the JSON's ``{}``: indexing reads names,
not data). ``--pybids`` also times pybids (``pip install pybids``), not a dependency.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path


def write_tree(root: Path, n_subjects: int) -> int:
    """Empty fMRIPrep-named files for ``n_subjects``; returns the number of files."""
    (root / "dataset_description.json").write_text(
        json.dumps({"Name": "fake", "BIDSVersion": "1.10.0", "DatasetType": "derivative"})
    )
    names = [
        "task-rest_space-fsLR_den-91k_bold.dtseries.nii",
        "task-rest_hemi-L_space-fsaverage5_bold.func.gii",
        "task-rest_hemi-R_space-fsaverage5_bold.func.gii",
        "task-rest_space-MNI152NLin2009cAsym_desc-preproc_bold.nii.gz",
        "task-rest_space-MNI152NLin2009cAsym_desc-brain_mask.nii.gz",
        "task-rest_desc-confounds_timeseries.tsv",
        "task-rest_desc-confounds_timeseries.json",
    ]
    for i in range(1, n_subjects + 1):
        func = root / f"sub-{i:04d}" / "func"
        func.mkdir(parents=True)
        for name in names:
            path = func / f"sub-{i:04d}_{name}"
            path.write_text("{}") if name.endswith(".json") else path.touch()
    return n_subjects * len(names)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--subjects", type=int, default=1000)
    parser.add_argument("--pybids", action="store_true", help="time pybids too")
    args = parser.parse_args()
    from lsd_dask.io.bids_index import find_bold

    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        n_files = write_tree(root, args.subjects)
        t0 = time.perf_counter()
        runs = find_bold(root, space="fsLR", den="91k", task="rest")
        took = time.perf_counter() - t0
        assert len(runs) == args.subjects
        print(f"{args.subjects} subjects, {n_files} files")
        print(f"lsd_dask.io.bids_index.find_bold: {took:.2f} s ({len(runs)} CIFTI runs)")
        if args.pybids:
            from bids import BIDSLayout

            t0 = time.perf_counter()
            layout = BIDSLayout(root, validate=False, is_derivative=True)
            found = layout.get(
                space="fsLR", den="91k", task="rest", suffix="bold", extension=".dtseries.nii"
            )
            took = time.perf_counter() - t0
            print(f"pybids BIDSLayout + get: {took:.2f} s ({len(found)} CIFTI runs)")


if __name__ == "__main__":
    main()
