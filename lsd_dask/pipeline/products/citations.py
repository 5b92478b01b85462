"""How to cite what a run used: the papers of its methods, spatial options and measures,
as Citation File Format references (``CITATION.cff``), atlas descriptions and the
derivative's ``README.md``."""

from __future__ import annotations

from typing import Any

from ... import evaluation
from ...io.bids import bids_label
from ..settings.methods import MethodSpec

__all__ = [
    "REFERENCES",
    "citation_line",
    "derivative_readme",
    "method_references",
    "run_references",
]


def _ref(kind: str, authors: list[str], title: str, year: int, **more: Any) -> dict[str, Any]:
    """A CFF reference entry; ``authors`` as "Family, Given" strings."""
    people = []
    for person in authors:
        family, _, given = person.partition(", ")
        people.append({"family-names": family, "given-names": given} if given else {"name": person})
    return {"type": kind, "authors": people, "title": title, "year": year, **more}


#: key -> CFF reference of the papers a run may rest on
REFERENCES: dict[str, dict[str, Any]] = {
    "directional": _ref(
        "article",
        ["Blumensath, Thomas"],
        "Directional clustering through matrix factorization",
        2016,
        journal="IEEE Transactions on Neural Networks and Learning Systems",
        volume=27,
        issue="10",
        start="2095",
        end="2107",
        doi="10.1109/TNNLS.2015.2505060",
    ),
    "lsd": _ref(
        "article",
        ["Arora, Raman", "Gupta, Maya R.", "Kapila, Amol", "Fazel, Maryam"],
        "Similarity-based clustering by left-stochastic matrix factorization",
        2013,
        journal="Journal of Machine Learning Research",
        volume=14,
        start="1715",
        end="1746",
    ),
    "spectral": _ref(
        "conference-paper",
        ["Ng, Andrew Y.", "Jordan, Michael I.", "Weiss, Yair"],
        "On spectral clustering: analysis and an algorithm",
        2001,
        **{"collection-title": "Advances in Neural Information Processing Systems 14"},
    ),
    "spherical_kmeans": _ref(
        "article",
        ["Dhillon, Inderjit S.", "Modha, Dharmendra S."],
        "Concept decompositions for large sparse text data using clustering",
        2001,
        journal="Machine Learning",
        volume=42,
        start="143",
        end="175",
        doi="10.1023/A:1007612920971",
    ),
    "kmeans": _ref(
        "article",
        ["Lloyd, Stuart P."],
        "Least squares quantization in PCM",
        1982,
        journal="IEEE Transactions on Information Theory",
        volume=28,
        issue="2",
        start="129",
        end="137",
        doi="10.1109/TIT.1982.1056489",
    ),
    "ward": _ref(
        "article",
        ["Ward, Joe H."],
        "Hierarchical grouping to optimize an objective function",
        1963,
        journal="Journal of the American Statistical Association",
        volume=58,
        issue="301",
        start="236",
        end="244",
        doi="10.1080/01621459.1963.10500845",
    ),
    "homogeneity": _ref(
        "article",
        [
            "Schaefer, Alexander",
            "Kong, Ru",
            "Gordon, Evan M.",
            "Laumann, Timothy O.",
            "Zuo, Xi-Nian",
            "Holmes, Avram J.",
            "Eickhoff, Simon B.",
            "Yeo, B. T. Thomas",
        ],
        "Local-global parcellation of the human cerebral cortex from intrinsic functional "
        "connectivity MRI",
        2018,
        journal="Cerebral Cortex",
        volume=28,
        issue="9",
        start="3095",
        end="3114",
        doi="10.1093/cercor/bhx179",
    ),
    "dcbc": _ref(
        "article",
        [
            "Zhi, Da",
            "King, Maedbh",
            "Hernandez-Castillo, Carlos R.",
            "Diedrichsen, Jörn",
        ],
        "Evaluating brain parcellations using the distance-controlled boundary coefficient",
        2022,
        journal="Human Brain Mapping",
        volume=43,
        issue="12",
        start="3706",
        end="3720",
        doi="10.1002/hbm.25878",
    ),
    "spin": _ref(
        "article",
        [
            "Alexander-Bloch, Aaron F.",
            "Shou, Haochang",
            "Liu, Siyuan",
            "Satterthwaite, Theodore D.",
            "Glahn, David C.",
            "Shinohara, Russell T.",
            "Vandekar, Simon N.",
            "Raznahan, Armin",
        ],
        "On testing for spatial correspondence between maps of human brain structure and function",
        2018,
        journal="NeuroImage",
        volume=178,
        start="540",
        end="551",
        doi="10.1016/j.neuroimage.2018.05.070",
    ),
}

#: the method of :data:`~lsd_dask.pipeline.settings.methods.METHODS` -> its papers' keys
_METHOD_PAPERS = {
    "directional": ("directional",),
    "lsd": ("lsd",),
    "hierarchical_lsd": ("lsd",),
    "spherical_kmeans": ("spherical_kmeans",),
    "kmeans": ("kmeans",),
    "spectral": ("spectral",),
    "ward": ("ward",),
}


def _measure_papers() -> list[str]:
    """The held-out measures' papers (:data:`lsd_dask.evaluation.MEASURES`), then the
    spin null's."""
    return [*(m.citation for m in evaluation.MEASURES if m.citation), "spin"]


def method_references(spec: MethodSpec) -> list[str]:
    """Keys of :data:`REFERENCES` for one method as the run used it: its own paper, and
    Ward's when an oversegmentation is merged by Ward's linkage."""
    keys = list(_METHOD_PAPERS.get(spec.method, ()))
    if float(spec.options.get("oversegment") or 1) > 1 and "ward" not in keys:
        keys.append("ward")
    return keys


def run_references(methods: list[MethodSpec], *, held_out: bool) -> list[str]:
    """Keys of :data:`REFERENCES` for a whole run, methods first, then the measures."""
    keys: list[str] = []
    for spec in methods:
        keys += [key for key in method_references(spec) if key not in keys]
    if held_out:
        keys += [k for k in _measure_papers() if k not in keys]
    return keys


def citation_line(key: str) -> str:
    """One reference as a line of text: authors (year). Title. Journal. doi."""
    ref = REFERENCES[key]
    names = [
        a.get("name") or f"{a['family-names']} {''.join(p[0] for p in a['given-names'].split())}"
        for a in ref["authors"]
    ]
    who = ", ".join(names[:3]) + (" et al." if len(names) > 3 else "")
    where = ref.get("journal") or ref.get("collection-title", "")
    doi = f" doi:{ref['doi']}" if "doi" in ref else ""
    return f"{who} ({ref['year']}). {ref['title']}. {where}.{doi}"


def derivative_readme(methods: list[MethodSpec], *, version: str, held_out: bool) -> str:
    """The derivative's ``README.md``: what the files are and how to cite them."""
    rows = []
    for spec in methods:
        cites = "; ".join(citation_line(k) for k in method_references(spec))
        name = f"atlas-{bids_label(spec.name)}<K><split>"
        rows.append(f"- `{name}` ({spec.name}): {spec.method} clustering. {cites}")
    measures = [f"- {citation_line(k)}" for k in _measure_papers()] if held_out else []
    lines = [
        "# lsd-dask split-half cortical parcellations",
        "",
        f"Made by lsd-dask {version}. Each method's parcellation of each split of the",
        "subjects at each K is a group atlas on a surface template, in `tpl-<template>/anat/`:",
        "`hemi-L`/`hemi-R` GIFTI label files, a CIFTI `.dlabel.nii` when the input was CIFTI,",
        "a look-up table (`.tsv`) and a sidecar (`.json`) with the settings and the scores.",
        "Each parcellation's `atlas-` label is the method, K and the split of the subjects",
        "(`atlas-directional200split1`); `scale-<K>` repeats K.",
        "`report.html` compares the parcellations; `report.json` holds every score.",
        "",
        "## Methods (cite these)",
        "",
        *rows,
        "",
        *(["## Measures", "", *measures, ""] if measures else []),
        "`CITATION.cff` lists the same references in the Citation File Format.",
        "",
    ]
    return "\n".join(lines)
