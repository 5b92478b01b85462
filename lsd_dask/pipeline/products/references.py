"""The papers a run may rest on, as Citation File Format references (key -> entry):
its methods, spatial options, measures, the SVD and the individual parcels."""

from __future__ import annotations

from typing import Any

__all__ = ["REFERENCES"]


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
    "randomized_svd": _ref(
        "article",
        ["Halko, Nathan", "Martinsson, Per-Gunnar", "Tropp, Joel A."],
        "Finding structure with randomness: probabilistic algorithms for constructing "
        "approximate matrix decompositions",
        2011,
        journal="SIAM Review",
        volume=53,
        issue="2",
        start="217",
        end="288",
        doi="10.1137/090771806",
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
    "wang2015": _ref(
        "article",
        [
            "Wang, Danhong",
            "Buckner, Randy L.",
            "Fox, Michael D.",
            "Holt, Daphne J.",
            "Holmes, Avram J.",
            "Stoecklein, Sophia",
            "Langs, Georg",
            "Pan, Ruiqi",
            "Qian, Tianyi",
            "Li, Kuncheng",
            "Baker, Justin T.",
            "Stufflebeam, Steven M.",
            "Wang, Kai",
            "Wang, Xiaomin",
            "Hong, Bo",
            "Liu, Hesheng",
        ],
        "Parcellating cortical functional networks in individuals",
        2015,
        journal="Nature Neuroscience",
        volume=18,
        issue="12",
        start="1853",
        end="1860",
        doi="10.1038/nn.4164",
    ),  # fmt: skip
    "kong2019": _ref(
        "article",
        [
            "Kong, Ru",
            "Li, Jingwei",
            "Orban, Csaba",
            "Sabuncu, Mert R.",
            "Liu, Hesheng",
            "Schaefer, Alexander",
            "Sun, Nanbo",
            "Zuo, Xi-Nian",
            "Holmes, Avram J.",
            "Eickhoff, Simon B.",
            "Yeo, B. T. Thomas",
        ],
        "Spatial topography of individual-specific cortical networks predicts human "
        "cognition, personality, and emotion",
        2019,
        journal="Cerebral Cortex",
        volume=29,
        issue="6",
        start="2533",
        end="2551",
        doi="10.1093/cercor/bhy123",
    ),  # fmt: skip
}
