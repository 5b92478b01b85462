"""scikit-learn's estimator checks on every clusterer.

The expected failures are properties of the methods, not of the API: cosine similarities
are undefined on the all-zero rows one check feeds, directional clustering's weights scale
rows rather than repeat samples, and NMF refuses the signed data of the clustering check.
LSD runs with an RBF similarity here: the checks use 2-feature data with 3 clusters, and a
cosine similarity of such data has rank 2.
"""

from sklearn.utils.estimator_checks import parametrize_with_checks

from lsd_dask.cluster import (
    KEVD,
    LSD,
    NMF,
    DirectionalClustering,
    HierarchicalLSD,
    KMeans,
    MeshParcellation,
    MeshWard,
    SemiNMF,
    SoF,
    SpectralClustering,
    SphericalKMeans,
    WardMerge,
)

_ZERO = "cosine similarity is undefined for the all-zero rows of this check"
_EXPECTED = {
    "LSD": {},
    "HierarchicalLSD": {"check_estimators_dtypes": _ZERO},
    "DirectionalClustering": {
        "check_estimators_dtypes": _ZERO,
        "check_sample_weight_equivalence_on_dense_data": (
            "weights scale rows (Blumensath's weighting remark); they do not repeat samples"
        ),
    },
    "SphericalKMeans": {},
    "NMF": {"check_clustering": "NMF needs non-negative data"},
}


def _expected(est):
    return _EXPECTED.get(type(est).__name__, {})


@parametrize_with_checks(
    [
        LSD(3, similarity="rbf", random_state=0),
        HierarchicalLSD(3),
        DirectionalClustering(3, random_state=0),
        KMeans(3, random_state=0),
        SphericalKMeans(3, random_state=0),
        KEVD(3, random_state=0),
        SpectralClustering(3, random_state=0),
        SoF(3, n_neighbors=3, random_state=0),
        SemiNMF(3, random_state=0),
        NMF(3, random_state=0),
        MeshWard(3),
        WardMerge(SphericalKMeans(), 3, random_state=0),
        MeshParcellation(SphericalKMeans(), 3, random_state=0),
    ],
    expected_failed_checks=_expected,
)
def test_sklearn_compatible(estimator, check):
    check(estimator)
