"""Real cortical templates from the ``brainspace`` package's data files.

The files are read straight from the installed package (GIFTI surfaces with nibabel, CSV
masks, atlases and matrices with numpy): ``brainspace`` itself, and the VTK it imports, is
never imported. Vertex order is the left hemisphere, then the right.

- ``conte69`` (32k_fs_LR): 32,492 vertices per hemisphere, midthickness surface, a
  medial-wall mask (58,558 cortical vertices), the Vos de Wael and Schaefer atlases at
  100-400 parcels and their HCP group connectivity (main and holdout groups);
- ``fsaverage5``: 10,242 vertices per hemisphere, pial surface, the medial wall of
  FreeSurfer's cortex labels (read off brainspace's real fsaverage5 run), no atlas.
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..io.surface_files import HEMISPHERES, load_mesh
from ..surface import Mesh

__all__ = [
    "STANDARD_MESHES",
    "TEMPLATES",
    "ATLASES",
    "Template",
    "load_template",
    "load_atlas",
    "load_group_connectivity",
    "brainspace_data",
    "identify_template",
    "medial_wall",
    "standard_mesh",
]

TEMPLATES = ("conte69", "fsaverage5")
#: atlases shipped for conte69, each at these scales (parcels over both hemispheres)
ATLASES = {"vosdewael": (100, 200, 300, 400), "schaefer": (100, 200, 300, 400)}
GROUPS = ("main", "holdout")

_INSTALL = "pip install 'lsd-dask[templates]' (or: pip install brainspace)"
_SURFACES = {
    "conte69": ("surfaces/conte69_32k_lh.gii", "surfaces/conte69_32k_rh.gii"),
    "fsaverage5": ("surfaces/fsa5.pial.lh.gii", "surfaces/fsa5.pial.rh.gii"),
}


@dataclass(frozen=True)
class Template:
    """A two-hemisphere cortical surface.

    Attributes
    ----------
    name : str
    meshes : dict of str to Mesh
        ``"left"`` and ``"right"``.
    cortex : ndarray of bool, shape (n_vertices,)
        True on cortex, False on the medial wall (all True when no mask is shipped).
    surface_files : dict of str to Path
        The GIFTI files the meshes were read from.
    """

    name: str
    meshes: dict[str, Mesh]
    cortex: np.ndarray
    surface_files: dict[str, Path]

    @property
    def hemisphere_sizes(self) -> list[int]:
        return [self.meshes[h].n_vertices for h in HEMISPHERES]

    @property
    def n_vertices(self) -> int:
        return int(sum(self.hemisphere_sizes))


def brainspace_data(relative: str) -> Path:
    """Path of a file in brainspace's ``datasets`` folder; a clear error when missing."""
    spec = importlib.util.find_spec("brainspace")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError(f"the cortical templates need the brainspace package: {_INSTALL}.")
    path = Path(list(spec.submodule_search_locations)[0]) / "datasets" / relative
    if not path.exists():
        raise FileNotFoundError(
            f"{path} is missing from the installed brainspace package; reinstall it: {_INSTALL}."
        )
    return path


def load_template(name: str = "conte69") -> Template:
    """Meshes and medial-wall mask of ``"conte69"`` (32k_fs_LR) or ``"fsaverage5"``."""
    if name not in TEMPLATES:
        raise ValueError(f"unknown template {name!r}; choose from {list(TEMPLATES)}.")
    files = {h: brainspace_data(f) for h, f in zip(HEMISPHERES, _SURFACES[name], strict=True)}
    meshes = {h: load_mesh(files[h]) for h in HEMISPHERES}
    cortex = ~medial_wall(name)
    return Template(name, meshes, cortex, files)


#: the standard meshes a pipeline file may name (``mesh: fsaverage5``), by vertices per
#: hemisphere; one is chosen when no mesh is given and the data's vertex count matches
STANDARD_MESHES = {"conte69": 32492, "fsaverage5": 10242}


def identify_template(meshes: Mapping[str, Mesh]) -> str | None:
    """The standard mesh (a key of :data:`STANDARD_MESHES`) whose triangles the meshes
    have, or None: a custom mesh.

    A template is known by its topology, not its vertex count: every surface of a template
    (pial, white, midthickness, inflated, sphere; any subject's, resampled to it) shares
    its triangles, while a custom mesh with as many vertices (an icosphere of 32,492) has
    others. Triangles are compared as sets of vertex triples, so their order and
    winding do not matter. A template whose package is missing is never matched.
    """
    sizes = [meshes[h].n_vertices for h in HEMISPHERES]
    for name, n in STANDARD_MESHES.items():
        if sizes != [n, n]:
            continue
        try:
            known = _template_triangles(name)
        except (ImportError, FileNotFoundError):
            continue
        if all(np.array_equal(_triangles(meshes[h].faces), known[h]) for h in HEMISPHERES):
            return name
    return None


def medial_wall(name: str) -> np.ndarray:
    """The medial wall of a standard mesh: bool over both hemispheres' vertices, True where
    a template carries no cortex.

    ``conte69``: brainspace's mask (3,221 and 3,205 vertices; 58,558 of cortex).
    ``fsaverage5``: the vertices that hold 0 in every volume of the real fsaverage5 run
    brainspace ships (FreeSurfer writes no data outside its cortex label there): 888 and
    881, the medial wall of FreeSurfer's ``lh.cortex.label`` and ``rh.cortex.label``.
    """
    return _medial_wall(name).copy()


@functools.cache
def _medial_wall(name: str) -> np.ndarray:
    if name == "conte69":
        return ~np.concatenate(
            [
                np.loadtxt(brainspace_data(f"surfaces/conte69_32k_{h}_mask.csv")) > 0
                for h in ("lh", "rh")
            ]
        )
    if name == "fsaverage5":
        import nibabel as nib

        run = "preprocessing/sub-010188_ses-02_task-rest_acq-AP_run-01.fsa5.{}.mgz"
        return np.concatenate(
            [
                ~np.asarray(nib.load(brainspace_data(run.format(h))).dataobj).squeeze().any(axis=1)
                for h in ("lh", "rh")
            ]
        )
    raise ValueError(f"unknown template {name!r}; choose from {list(TEMPLATES)}.")


def standard_mesh(name: str) -> tuple[dict[str, Path], str]:
    """The surface files of a standard mesh and a line that says what they are:
    ``conte69`` (32k_fs_LR midthickness, brainspace's) or ``fsaverage5`` (pial, nilearn's
    own copy, so that no download is needed)."""
    if name in ("fsLR", "fsLR32k", "32k_fs_LR"):
        name = "conte69"
    if name not in STANDARD_MESHES:
        raise ValueError(
            f"mesh: unknown standard mesh {name!r}; choose from {list(STANDARD_MESHES)} or "
            "give the surfaces as {left: lh.surf.gii, right: rh.surf.gii}."
        )
    if name == "conte69":
        files = {h: brainspace_data(f) for h, f in zip(HEMISPHERES, _SURFACES[name], strict=True)}
        return files, "conte69: 32k_fs_LR midthickness surfaces (brainspace's)"
    import nilearn

    data = Path(nilearn.__file__).parent / "datasets" / "data" / "fsaverage5"
    files = {h: data / f"pial_{h}.gii.gz" for h in HEMISPHERES}
    return files, "fsaverage5: pial surfaces (nilearn's)"


def load_atlas(name: str = "vosdewael", scale: int = 400) -> np.ndarray:
    """An atlas on conte69: parcels ``1..scale`` per vertex, ``0`` on the medial wall.

    Vertices that the atlas labels but the medial-wall mask excludes (808 of them in every
    shipped atlas) are set to 0, so the labels agree with :func:`load_template`'s mask.
    """
    _check_atlas(name, scale)
    labels = np.loadtxt(brainspace_data(f"parcellations/{name}_{scale}_conte69.csv"))
    labels = labels.astype(np.int64)
    cortex = load_template("conte69").cortex
    labels[~cortex] = 0
    return labels


def load_group_connectivity(
    name: str = "vosdewael", scale: int = 400, group: str = "main"
) -> np.ndarray:
    """HCP group-mean functional connectivity (Pearson r) between the atlas' parcels.

    ``group``: ``"main"`` or ``"holdout"``, two independent groups of HCP subjects.
    """
    _check_atlas(name, scale)
    if group not in GROUPS:
        raise ValueError(f"group must be one of {list(GROUPS)}, got {group!r}.")
    path = brainspace_data(f"matrices/{group}_group/{name}_{scale}_mean_connectivity_matrix.csv")
    C = np.loadtxt(path, delimiter=",")
    if C.shape != (scale, scale):
        raise ValueError(f"{path}: expected a {scale} x {scale} matrix, got {C.shape}.")
    return C


def _check_atlas(name: str, scale: int) -> None:
    if name not in ATLASES:
        raise ValueError(f"unknown atlas {name!r}; choose from {list(ATLASES)}.")
    if int(scale) not in ATLASES[name]:
        raise ValueError(f"atlas {name!r} comes at scales {list(ATLASES[name])}, not {scale}.")


@functools.cache
def _template_triangles(name: str) -> dict[str, np.ndarray]:
    files, _ = standard_mesh(name)
    return {h: _triangles(load_mesh(files[h]).faces) for h in HEMISPHERES}


def _triangles(faces: np.ndarray) -> np.ndarray:
    """A mesh's triangles in one canonical order: each triple sorted, the rows sorted."""
    f = np.sort(np.asarray(faces, np.int64), axis=1)
    return f[np.lexsort(f.T[::-1])]
