"""Surface fMRI and parcellation files through nibabel: CIFTI-2, GIFTI, FreeSurfer MGH.

Readers return one subject as ``(n_vertices, n_timepoints)`` float32 with the left
hemisphere first, plus the per-hemisphere vertex counts. Writers produce files that
Connectome Workbench and nilearn open: ``.label.gii`` per hemisphere and ``.dlabel.nii``
(CIFTI-2 dense label) for CIFTI inputs. Label 0 is Workbench's unlabelled key ``???``
(``Background`` in the run's ``_dseg.tsv``), transparent; parcels from 1.
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
import zlib
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

import nibabel as nib
import numpy as np
from nibabel import cifti2
from nibabel.nifti2 import Nifti2Header

from ..surface import Mesh
from .atomic import atomic_path

__all__ = [
    "HEMISPHERES",
    "UNLABELLED",
    "SubjectFiles",
    "load_image",
    "load_subject",
    "subject_t_r",
    "timepoint_count",
    "vertex_counts",
    "release_cache",
    "READERS",
    "Reader",
    "file_keys",
    "load_mesh",
    "read_hemisphere",
    "label_table",
    "write_label_gifti",
    "write_shape_gifti",
    "write_dlabel",
    "cifti_vertices",
    "write_func_gifti",
    "write_surface_gifti",
    "write_dtseries",
    "read_zarr_subject",
    "write_zarr_subject",
]

HEMISPHERES = ("left", "right")

#: the name of label 0 in label tables: Connectome Workbench's unlabelled key
UNLABELLED = "???"
_CIFTI_NAMES = {"left": "CIFTI_STRUCTURE_CORTEX_LEFT", "right": "CIFTI_STRUCTURE_CORTEX_RIGHT"}
_K = TypeVar("_K")
_V = TypeVar("_V")


#: set to "allow" to read GIFTI files whose data sit in external files
ALLOW_EXTERNAL_ENV = "LSD_DASK_GIFTI_EXTERNAL"


def load_image(path: str | os.PathLike[str]) -> Any:
    """``nib.load``, except that a GIFTI whose data arrays name an external file
    (``ExternalFileBinary``: nibabel would read whatever file it names, anywhere on the
    machine) is refused unless ``LSD_DASK_GIFTI_EXTERNAL=allow``. The file is read once."""
    p = Path(path)
    if not p.name.lower().endswith(".gii"):
        return nib.load(str(p))
    data = p.read_bytes()
    if b"ExternalFileBinary" in data:
        if os.environ.get(ALLOW_EXTERNAL_ENV) != "allow":
            raise ValueError(
                f"{p} keeps its data in an external file (ExternalFileBinary); refused, as it "
                f"could name any file. Convert it (wb_command -gifti-convert BASE64_BINARY) "
                f"or set {ALLOW_EXTERNAL_ENV}=allow."
            )
        return nib.load(str(p))
    return nib.GiftiImage.from_bytes(data)


@dataclass(frozen=True)
class SubjectFiles:
    """Where one subject's data live: an input kind (a key of :data:`READERS`) and its files.

    Attributes
    ----------
    subject : str
    kind : str
        "cifti" (one ``.dtseries.nii``), "gifti" or "mgh" (a left and a right hemisphere
        file), "zarr" (an (n_vertices, T) array, left hemisphere first, with a
        ``hemisphere_sizes`` attribute).
    paths : tuple of Path
        In the order of the kind's keys (:attr:`Reader.keys`).
    time_slice : (start, stop) or None
        Time points to keep (e.g. two halves of one run).
    """

    subject: str
    kind: str
    paths: tuple[Path, ...]
    time_slice: tuple[int, int] | None = None

    @classmethod
    def from_keys(
        cls, subject: str, *, time_slice: tuple[int, int] | None = None, **files: Any
    ) -> SubjectFiles:
        """From a pipeline entry's file keys, e.g. ``cifti=...`` or ``left=..., right=...``;
        the kind is the reader whose keys these are and whose files they look like."""
        given = {k: Path(v) for k, v in files.items() if v is not None}
        for kind, reader in READERS.items():
            if set(given) == set(reader.keys) and reader.accepts(given):
                paths = tuple(given[k] for k in reader.keys)
                return cls(subject, kind, paths, time_slice)
        choices = ", ".join(sorted({"+".join(r.keys) for r in READERS.values()}))
        got = sorted(given) or "none"
        raise ValueError(f"subject {subject}: give one of {choices} for its files, got {got}.")


def load_subject(files: SubjectFiles) -> tuple[np.ndarray, list[int]]:
    """Read one subject: (n_vertices, T) float32, left then right, and hemisphere sizes."""
    for p in files.paths:
        if not Path(p).exists():
            raise FileNotFoundError(f"subject {files.subject}: {p} does not exist.")
    try:
        x, sizes = READERS[files.kind].load(files)
    except (OSError, EOFError, zlib.error) as err:  # a file damaged past its header
        where = ", ".join(str(p) for p in files.paths)
        raise ValueError(
            f"subject {files.subject}: cannot read {where} ({type(err).__name__}: {err})."
        ) from err
    except ValueError as err:  # a reader's own message names the file; add the subject
        if str(err).startswith(f"subject {files.subject}:"):
            raise
        raise ValueError(f"subject {files.subject}: {err}") from None
    if files.time_slice is not None:
        a, b = files.time_slice
        if not 0 <= a < b <= x.shape[1]:
            raise ValueError(
                f"subject {files.subject}: time_slice {files.time_slice} is outside the "
                f"{x.shape[1]} time points."
            )
        x = x[:, a:b]
    return x, sizes


def vertex_counts(files: SubjectFiles) -> list[int]:
    """Vertices per hemisphere of a subject's files, from their headers only (a truncated
    uncompressed file fails here, before anything reads its data)."""
    counts: list[int] = READERS[files.kind].vertex_counts(files)
    return counts


def timepoint_count(files: SubjectFiles) -> int:
    """A subject's time points, from its headers (a GIFTI's ``NumberOfDataArrays``, in its
    first bytes), or its ``time_slice``'s: what balances the splits of a study without
    reading its data."""
    n: int = READERS[files.kind].timepoints(files)
    if files.time_slice is not None:
        a, b = files.time_slice
        return max(0, min(b, n) - a)
    return n


def release_cache(files: SubjectFiles) -> int:
    """Ask the operating system to drop a subject's files from its page cache, once they
    have been read for good; returns the files it was asked for.

    Ingest reads each input once per run, and the SVD then reads the split stores that
    ingest wrote three more times: the page cache is worth more holding the stores. On the
    full-scale study (17 GB of inputs and 17 GB of stores in 24 GB of memory) the inputs
    otherwise push most of the stores out, and each split's first SVD pass reads its
    store from disk. Advice only (``posix_fadvise(..., POSIX_FADV_DONTNEED)``): a file
    system or platform without it, a page still mapped or not yet written back, keeps
    its pages, and nothing fails.
    """
    advise = getattr(os, "posix_fadvise", None)
    if advise is None:
        return 0
    done = 0
    for path in files.paths:
        # a Zarr subject is a folder: its chunk or shard files
        found = sorted(Path(path).rglob("*")) if Path(path).is_dir() else [Path(path)]
        for f in (f for f in found if f.is_file()):
            try:
                fd = os.open(f, os.O_RDONLY)
            except OSError:
                continue  # not a regular file, or gone: there is nothing to drop
            try:
                advise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
                done += 1
            except OSError:
                pass
            finally:
                os.close(fd)
    return done


def subject_t_r(files: SubjectFiles) -> float | None:
    """The repetition time in seconds that a subject's file states, or None.

    CIFTI: the series axis' step (seconds, or milliseconds by its unit). GIFTI: the
    ``TimeStep`` metadata of the first data array (milliseconds, FreeSurfer's convention).
    MGH: the header's ``tr`` (milliseconds; 0 means unknown). Zarr: a ``t_r`` attribute.
    """
    tr: float | None = READERS[files.kind].t_r(files)
    return tr


def read_hemisphere(path: Path) -> np.ndarray:
    """One hemisphere's time series from ``.func.gii`` or ``.mgh``/``.mgz``: (n, T) float32."""
    name = path.name.lower()
    img = load_image(path)
    if name.endswith(".gii"):
        arrays = [np.asarray(d.data) for d in img.darrays]
        if len(arrays) == 1 and arrays[0].ndim == 2:
            return arrays[0].astype(np.float32)
        shapes = sorted({a.shape for a in arrays})
        if len(shapes) > 1:  # one array per time point: each over every vertex
            odd = next(i for i, a in enumerate(arrays) if a.shape != arrays[0].shape)
            raise ValueError(
                f"{path}: its data arrays differ in length ({arrays[0].shape[0]} values in "
                f"the first, {arrays[odd].shape[0] if arrays[odd].ndim else 0} in array {odd})."
            )
        return np.stack(arrays, axis=1).astype(np.float32)
    data = np.asarray(img.dataobj, dtype=np.float32)
    return data.reshape(data.shape[0], -1)


def read_zarr_subject(path: Path) -> tuple[np.ndarray, list[int]]:
    """A subject already in Zarr: an array (n_vertices, T) with ``hemisphere_sizes``."""
    import zarr

    arr = zarr.open_array(str(path), mode="r")
    sizes: Any = arr.attrs.get("hemisphere_sizes")
    if arr.ndim != 2 or not sizes or int(sum(sizes)) != arr.shape[0]:
        raise ValueError(
            f"{path}: expected a 2-D (n_vertices, T) array whose 'hemisphere_sizes' attribute "
            f"sums to n_vertices; got shape {arr.shape} and sizes {sizes}."
        )
    return np.asarray(arr[...], np.float32), [int(n) for n in sizes]


def write_zarr_subject(
    path: str | os.PathLike[str],
    data: np.ndarray,
    hemi_sizes: list[int],
    *,
    tr: float | None = None,
) -> Path:
    """Store one subject as a Zarr array readable by :func:`read_zarr_subject` (``tr``, in
    seconds, as its ``t_r`` attribute)."""
    import zarr

    p = Path(path)
    with atomic_path(p) as tmp:
        arr = zarr.create_array(
            str(tmp),
            shape=data.shape,
            dtype="float32",
            chunks=(min(data.shape[0], 32768), data.shape[1]),
            overwrite=True,
        )
        arr[...] = np.asarray(data, np.float32)
        arr.attrs["hemisphere_sizes"] = [int(n) for n in hemi_sizes]
        if tr is not None:
            arr.attrs["t_r"] = float(tr)
    return p


def load_mesh(path: str | os.PathLike[str], hemi: str | None = None, what: str = "mesh") -> Mesh:
    """A GIFTI surface (``.surf.gii``): vertices and triangles. ``hemi``: the hemisphere it
    is given as, checked against the file's own ``AnatomicalStructurePrimary`` (``what``
    names the setting in the error)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"surface {p} does not exist.")
    img = load_image(p)
    if hemi is not None:
        check_structure(img, hemi, p, f"{what}.{hemi}: ")
    pts = img.get_arrays_from_intent("NIFTI_INTENT_POINTSET")
    tri = img.get_arrays_from_intent("NIFTI_INTENT_TRIANGLE")
    if not pts or not tri:
        raise ValueError(f"{p} is not a GIFTI surface (no pointset and triangle arrays).")
    where = f"{what}.{hemi} ({p})" if hemi is not None else str(p)
    try:
        return Mesh(np.asarray(pts[0].data, np.float64), np.asarray(tri[0].data, np.int64))
    except ValueError as err:  # faces past the vertices, arrays of the wrong shape
        raise ValueError(f"{where}: {err}") from None


def label_table(
    n_labels: int, *, colours: np.ndarray | None = None, seed: int = 0
) -> dict[int, tuple[str, tuple[float, ...]]]:
    """Names and RGBA colours for labels 0..n_labels: 0 is ``???``, transparent (the
    surface shows through), in ``colours[0]``'s RGB when given.

    ``???`` is Connectome Workbench's unlabelled key: under another name Workbench takes
    key 0 for a parcel (``-cifti-parcellate`` then makes K + 1 parcels, ``-label-to-border``
    warns of conflicting keys, and a label table it exports cannot be imported again).
    The run's ``_dseg.tsv`` keeps BIDS' ``Background`` for index 0.

    Names are ``parcel0001``... (as in the run's ``_dseg.tsv``). ``colours``: RGB(A) rows
    in [0, 1] for ids 0..n_labels; None draws seeded random colours.
    """
    rng = np.random.default_rng(seed)
    r0, g0, b0 = (0.0, 0.0, 0.0) if colours is None else (float(v) for v in colours[0][:3])
    table: dict[int, tuple[str, tuple[float, ...]]] = {0: (UNLABELLED, (r0, g0, b0, 0.0))}
    for i in range(1, n_labels + 1):
        if colours is not None:
            r, g, b = (float(v) for v in np.asarray(colours)[i][:3])
        else:
            r, g, b = (float(v) for v in rng.uniform(0.15, 0.95, 3))
        table[i] = (f"parcel{i:04d}", (r, g, b, 1.0))
    return table


def write_label_gifti(
    path: str | os.PathLike[str],
    labels: np.ndarray,
    *,
    hemisphere: str,
    colours: np.ndarray | None = None,
    name: str | None = None,
) -> Path:
    """A ``.label.gii`` for one hemisphere (int32 labels, 0 = background).

    ``colours``: RGB(A) rows for ids 0..max (see :func:`label_table`); ``name`` names the
    map (Workbench shows it; nilearn reads it).
    """
    lab = np.asarray(labels, np.int32)
    table = nib.gifti.GiftiLabelTable()
    for key, (label, rgba) in label_table(int(lab.max(initial=0)), colours=colours).items():
        lbl = nib.gifti.GiftiLabel(key=key, red=rgba[0], green=rgba[1], blue=rgba[2], alpha=rgba[3])
        lbl.label = label
        table.labels.append(lbl)
    structure = "CortexLeft" if hemisphere == "left" else "CortexRight"
    meta = nib.gifti.GiftiMetaData({"AnatomicalStructurePrimary": structure})
    darray = nib.gifti.GiftiDataArray(
        lab,
        intent="NIFTI_INTENT_LABEL",
        datatype="NIFTI_TYPE_INT32",
        meta=nib.gifti.GiftiMetaData({"Name": name} if name else {}),
    )
    img = nib.gifti.GiftiImage(labeltable=table, darrays=[darray], meta=meta)
    return _atomic_save(img, Path(path))


def write_shape_gifti(
    path: str | os.PathLike[str], values: np.ndarray, *, hemisphere: str, name: str | None = None
) -> Path:
    """A ``.shape.gii`` of one float32 value per vertex for one hemisphere (a scalar map,
    Workbench's metric file; ``name`` names the map)."""
    structure = "CortexLeft" if hemisphere == "left" else "CortexRight"
    darray = nib.gifti.GiftiDataArray(
        np.ascontiguousarray(values, np.float32),
        intent="NIFTI_INTENT_SHAPE",
        datatype="NIFTI_TYPE_FLOAT32",
        meta=nib.gifti.GiftiMetaData({"Name": name} if name else {}),
    )
    meta = nib.gifti.GiftiMetaData({"AnatomicalStructurePrimary": structure})
    return _atomic_save(nib.gifti.GiftiImage(darrays=[darray], meta=meta), Path(path))


def write_dlabel(
    path: str | os.PathLike[str],
    labels: np.ndarray,
    hemi_sizes: list[int],
    *,
    name: str = "parcellation",
    colours: np.ndarray | None = None,
    vertices: dict[str, np.ndarray] | None = None,
) -> Path:
    """A CIFTI-2 dense label file over both cortical surfaces.

    Parameters
    ----------
    labels : ndarray of shape (n_vertices,)
        Every mesh vertex, left hemisphere first.
    hemi_sizes : vertices per hemisphere
    name : the map's name
    colours : RGB(A) rows for ids 0..max (see :func:`label_table`)
    vertices : {"left": indices, "right": indices}, optional
        The grayordinates to write per hemisphere, e.g. an input's own brain models
        (:func:`cifti_vertices`: HCP's 32k files leave the medial wall out). Default: every
        vertex.
    """
    lab = np.asarray(labels, np.int32)
    columns, models = _surface_models(hemi_sizes, vertices)
    table = label_table(int(lab.max(initial=0)), colours=colours)
    matrix = _SizedMatrix((1, columns.size))
    matrix.append(cifti2.LabelAxis([name], [table]).to_mapping(0))
    matrix.append(models)
    img = cifti2.Cifti2Image(lab[columns][None, :], header=cifti2.Cifti2Header(matrix))
    return _atomic_save(img, Path(path))


def write_dscalar(
    path: str | os.PathLike[str],
    values: np.ndarray,
    hemi_sizes: list[int],
    *,
    name: str = "map",
    vertices: dict[str, np.ndarray] | None = None,
) -> Path:
    """A CIFTI-2 dense scalar file (one float32 map) over both cortical surfaces: the
    :func:`write_dlabel` of a value per vertex (``vertices`` as there)."""
    columns, models = _surface_models(hemi_sizes, vertices)
    data = np.asarray(values, np.float32)[columns][None, :]
    matrix = _SizedMatrix((1, columns.size))
    matrix.append(cifti2.ScalarAxis([name]).to_mapping(0))
    matrix.append(models)
    img = cifti2.Cifti2Image(data, header=cifti2.Cifti2Header(matrix))
    return _atomic_save(img, Path(path))


def cifti_vertices(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The cortical vertices a CIFTI file's brain models hold, per hemisphere."""
    bm = nib.load(str(path)).header.get_axis(1)
    found = {name: model for name, _, model in bm.iter_structures()}
    return {h: np.asarray(found[_CIFTI_NAMES[h]].vertex, np.int64) for h in HEMISPHERES}


def write_func_gifti(
    path: str | os.PathLike[str], data: np.ndarray, *, hemisphere: str, tr: float | None = None
) -> Path:
    """A ``.func.gii`` time series (one data array per time point); ``tr`` in seconds goes
    into each array's ``TimeStep`` metadata, in milliseconds (FreeSurfer's convention)."""
    structure = "CortexLeft" if hemisphere == "left" else "CortexRight"
    meta = {} if tr is None else {"TimeStep": f"{1000.0 * tr:.6f}"}
    darrays = [
        nib.gifti.GiftiDataArray(
            np.ascontiguousarray(data[:, t], np.float32),
            intent="NIFTI_INTENT_TIME_SERIES",
            datatype="NIFTI_TYPE_FLOAT32",
            meta=nib.gifti.GiftiMetaData(meta),
        )
        for t in range(data.shape[1])
    ]
    img = nib.gifti.GiftiImage(
        darrays=darrays, meta=nib.gifti.GiftiMetaData({"AnatomicalStructurePrimary": structure})
    )
    return _atomic_save(img, Path(path))


def write_surface_gifti(path: str | os.PathLike[str], mesh: Mesh, *, hemisphere: str) -> Path:
    """A ``.surf.gii`` mesh. Its hemisphere goes into the file's and the point set's
    metadata: Workbench reads a surface's structure from the point set."""
    structure = "CortexLeft" if hemisphere == "left" else "CortexRight"
    pts = nib.gifti.GiftiDataArray(
        mesh.vertices.astype(np.float32),
        intent="NIFTI_INTENT_POINTSET",
        datatype="NIFTI_TYPE_FLOAT32",
        meta=nib.gifti.GiftiMetaData({"AnatomicalStructurePrimary": structure}),
    )
    tri = nib.gifti.GiftiDataArray(
        mesh.faces.astype(np.int32), intent="NIFTI_INTENT_TRIANGLE", datatype="NIFTI_TYPE_INT32"
    )
    img = nib.gifti.GiftiImage(
        darrays=[pts, tri], meta=nib.gifti.GiftiMetaData({"AnatomicalStructurePrimary": structure})
    )
    return _atomic_save(img, Path(path))


def write_dtseries(
    path: str | os.PathLike[str],
    data: np.ndarray,
    hemi_sizes: list[int],
    *,
    tr: float = 1.0,
    cortex: np.ndarray | None = None,
    subcortical: np.ndarray | None = None,
) -> Path:
    """A CIFTI-2 dense time series over both cortical surfaces.

    Parameters
    ----------
    data : ndarray of shape (n_vertices, T)
        Every mesh vertex, left hemisphere first.
    cortex : ndarray of bool, shape (n_vertices,), optional
        Vertices to include as grayordinates; the others (the medial wall) are left out of
        the brain models, as in HCP's 32k files. Default: every vertex.
    subcortical : ndarray of shape (n_voxels, T), optional
        Time series of a subcortical volume block (two structures on a small voxel grid), as
        in HCP's grayordinates; surface pipelines must ignore it.
    """
    keep = np.ones(sum(hemi_sizes), bool) if cortex is None else np.asarray(cortex, bool)
    bm = None
    start = 0
    for hemi, n in zip(HEMISPHERES, hemi_sizes, strict=False):
        idx = np.flatnonzero(keep[start : start + n])
        part = cifti2.BrainModelAxis.from_surface(idx, n, name=_CIFTI_NAMES[hemi])
        bm = part if bm is None else bm + part
        start += n
    cols = [np.asarray(data, np.float32)[keep]]
    if subcortical is not None:
        bm = bm + _subcortical_axis(subcortical.shape[0])
        cols.append(np.asarray(subcortical, np.float32))
    series = cifti2.SeriesAxis(start=0.0, step=tr, size=data.shape[1])
    img = cifti2.Cifti2Image(np.ascontiguousarray(np.concatenate(cols).T), header=(series, bm))
    return _atomic_save(img, Path(path))


def _surface_models(
    hemi_sizes: list[int], vertices: dict[str, np.ndarray] | None
) -> tuple[np.ndarray, Any]:
    """The surface's columns (indices into a both-hemisphere vertex array) and the brain
    models' index map (dimension 1) of a dense file over ``vertices``, made once per
    process for each layout: nibabel builds it through a vertex-by-vertex axis (0.3 s at
    64,984 vertices), which a run's 20-odd label files share."""
    parts = [
        np.arange(n) if vertices is None else np.asarray(vertices[h], np.int64)
        for h, n in zip(HEMISPHERES, hemi_sizes, strict=False)
    ]
    digests = [hashlib.blake2b(p.tobytes(), digest_size=16).digest() for p in parts]
    key = (tuple(hemi_sizes), *digests)
    hit = _MODELS.get(key)
    if hit is not None:
        return hit
    bm = None
    for hemi, n, idx in zip(HEMISPHERES, hemi_sizes, parts, strict=False):
        part = cifti2.BrainModelAxis.from_surface(idx, n, name=_CIFTI_NAMES[hemi])
        bm = part if bm is None else bm + part
    offsets = np.cumsum([0, *hemi_sizes[:-1]])
    columns = np.concatenate([o + p for o, p in zip(offsets, parts, strict=False)])
    assert bm is not None  # two hemispheres
    made = (columns, bm.to_mapping(1))
    _MODELS.put(key, made)
    return made


class _SizedMatrix(cifti2.Cifti2Matrix):  # type: ignore[misc]
    """A CIFTI matrix that knows its data shape: nibabel otherwise rebuilds every index
    map's axis to find it, the brain models' vertex by vertex, once when the image is made
    and once when it is saved."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        super().__init__()
        self._shape = tuple(shape)

    def get_data_shape(self) -> tuple[int, ...]:
        return self._shape


def _subcortical_axis(n_voxels: int) -> Any:
    """Voxels split between the left and right thalamus on a 2 mm grid."""
    side = int(np.ceil((n_voxels / 2) ** (1 / 3))) + 1
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    axis = None
    left = n_voxels // 2
    for name, count, offset in (
        ("CIFTI_STRUCTURE_THALAMUS_LEFT", left, 0),
        ("CIFTI_STRUCTURE_THALAMUS_RIGHT", n_voxels - left, side),
    ):
        grid = np.stack(np.unravel_index(np.arange(count), (side, side, side)), axis=1)
        grid[:, 0] += offset
        part = cifti2.BrainModelAxis(
            name, voxel=grid, affine=affine, volume_shape=(2 * side, side, side)
        )
        axis = part if axis is None else axis + part
    return axis


# --------------------------------------------------------------------------- helpers


def _load_cifti(path: Path) -> tuple[np.ndarray, list[int]]:
    """A dtseries' cortex as a (vertices, T) float32 array (absent vertices 0), and the
    vertices per hemisphere.

    nibabel parses the CIFTI header's XML and builds its brain-model axis vertex by vertex:
    0.35 s of a 64,984-vertex × 1,000 subject's read here, on every subject, although a
    study's subjects share that header. The layout it gives (each hemisphere's columns
    and vertices) is kept per process, keyed by the header's bytes (the NIfTI-2 header
    and its extensions, up to the data): a subject whose header has the same bytes is read
    from its data offset directly, as nibabel reads it (a memory map in the header's dtype
    and byte order, its scaling applied).
    """
    known = _known_layout(path)
    if known.layout is None:
        img = _cifti_image(path)
        layout = _layout_of(img, path)
        _CIFTI_LAYOUTS.put(known.key, layout)
        data = np.asarray(img.get_fdata(dtype=np.float32))  # (T, grayordinates)
    else:
        layout, data = known.layout, _cifti_data(path, known.head, known.offset)
    # one (vertices, T) array written in place: no per-hemisphere copies to concatenate
    out = np.zeros((sum(layout.sizes), data.shape[0]), np.float32)  # absent vertices stay 0
    start = 0
    for slc, vertex, n in zip(layout.columns, layout.vertices, layout.sizes, strict=True):
        out[start + vertex] = data[:, slc].T
        start += n
    return out, list(layout.sizes)


@dataclass(frozen=True)
class _CiftiLayout:
    """Where a dtseries keeps each hemisphere: its columns, their vertices, its size."""

    columns: tuple[slice, ...]
    vertices: tuple[np.ndarray, ...]
    sizes: tuple[int, ...]


class _Recent(Generic[_K, _V]):
    """The last few things this process made, by key (thread-safe); an empty key (a file
    read without its header's digest) is not kept."""

    def __init__(self, size: int = 8) -> None:
        self._size = size
        self._items: OrderedDict[_K, _V] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: _K) -> _V | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: _K, value: _V) -> None:
        if not key:
            return
        with self._lock:
            self._items[key] = value
            while len(self._items) > self._size:
                self._items.popitem(last=False)


#: this process's parsed CIFTI layouts (:func:`_load_cifti`), by header digest
_CIFTI_LAYOUTS: _Recent[bytes, _CiftiLayout] = _Recent()
#: the brain models of the dense files this process wrote (:func:`_surface_models`)
_MODELS: _Recent[tuple[Any, ...], tuple[np.ndarray, Any]] = _Recent()
#: the most header bytes (NIfTI-2 header and extensions) read to look a layout up: a
#: 64,984-vertex dtseries has 0.37 MB
_MAX_HEADER_BYTES = 64 * 2**20


@dataclass(frozen=True)
class _Known:
    """A dtseries' header digest (empty where the file is not plain NIfTI-2), its NIfTI-2
    header and data offset, and its layout where that digest was parsed before."""

    key: bytes
    head: Any
    offset: int
    layout: _CiftiLayout | None


def _known_layout(path: Path) -> _Known:
    """The file's header bytes read (not parsed) and looked up among the known layouts."""
    with open(path, "rb") as f:
        try:
            head = Nifti2Header.from_fileobj(f, check=False)
            offset = int(head["vox_offset"])
            if not 0 < offset <= min(os.fstat(f.fileno()).st_size, _MAX_HEADER_BYTES):
                raise ValueError(f"data offset {offset}")
            f.seek(0)
            key = hashlib.blake2b(f.read(offset), digest_size=20).digest()
        except Exception:  # not NIfTI-2, or damaged: nibabel's own load says what is wrong
            return _Known(b"", None, 0, None)
    return _Known(key, head, offset, _CIFTI_LAYOUTS.get(key))


def _cifti_image(path: Path) -> Any:
    img = nib.load(str(path))
    if not isinstance(img, cifti2.Cifti2Image):
        raise ValueError(f"{path} is not a CIFTI-2 file.")
    return img


def _layout_of(img: Any, path: Path) -> _CiftiLayout:
    """The cortex's layout in a parsed dtseries; an error names the file and what it lacks."""
    bm = img.header.get_axis(1)
    if not isinstance(bm, cifti2.BrainModelAxis):
        raise ValueError(f"{path}: the second axis is not a brain-model axis (not a dtseries?).")
    found: Mapping[str, Any] = {name: (slc, model) for name, slc, model in bm.iter_structures()}
    columns, vertices, sizes = [], [], []
    for hemi in HEMISPHERES:
        key = _CIFTI_NAMES[hemi]
        if key not in found:
            raise ValueError(f"{path} has no {key} surface model.")
        slc, model = found[key]
        columns.append(slc)
        vertices.append(np.asarray(model.vertex))
        sizes.append(int(model.nvertices[key]))
    return _CiftiLayout(tuple(columns), tuple(vertices), tuple(sizes))


def _cifti_data(path: Path, head: Any, offset: int) -> Any:
    """The (T, grayordinates) data of a dtseries whose header is known, as nibabel reads
    it: mapped from the file in the header's dtype (NIfTI's column-major order), scaled
    by its slope and intercept where they are set."""
    shape, dtype = head.get_data_shape(), head.get_data_dtype()
    try:
        _check_size(path, offset, shape, dtype)
    except ValueError as err:  # as nibabel's read of a cut file fails (load_subject names it)
        raise EOFError(str(err)) from None
    t, g = int(shape[-2]), int(shape[-1])
    data: Any = np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(t, g), order="F")
    slope, inter = head.get_slope_inter()
    if slope is not None and (slope, inter) != (1.0, 0.0):
        data = data * np.float32(slope) + np.float32(inter or 0.0)
    elif dtype != np.float32:
        data = data.astype(np.float32)
    return data


def _atomic_save(img: Any, path: Path) -> Path:
    """Save under a temporary name in the same folder, then rename into place."""
    with atomic_path(path) as tmp:
        nib.save(img, str(tmp))
    return path


# --------------------------------------------------------------------------- readers


@dataclass(frozen=True)
class Reader:
    """How one input format is read: vertex counts from the headers, the data, the TR.

    ``keys`` are the pipeline file's keys that name its files (in the order of
    :attr:`SubjectFiles.paths`); ``suffixes``, when given, tell it apart from another
    format with the same keys.
    """

    keys: tuple[str, ...]
    vertex_counts: Any
    load: Any
    t_r: Any
    timepoints: Any
    suffixes: tuple[str, ...] | None = None
    exclude_suffixes: tuple[str, ...] = ()

    def accepts(self, files: Mapping[str, Path]) -> bool:
        """Whether files under these keys are this format (by the first file's name)."""
        name = str(files[self.keys[0]]).lower()
        if name.endswith(self.exclude_suffixes):
            return False
        return self.suffixes is None or name.endswith(self.suffixes)


def file_keys() -> set[str]:
    """The pipeline-file keys that name a subject's files, over every format."""
    return {k for r in READERS.values() for k in r.keys}


def _cifti_counts(files: SubjectFiles) -> list[int]:
    """Vertices per hemisphere (0 for one the file lacks), from the header: from the
    known layouts where the header's bytes were parsed before (:func:`_load_cifti`)."""
    (path,) = files.paths
    known = _known_layout(path)
    if known.layout is not None:
        head = known.head
        _check_size(path, known.offset, head.get_data_shape(), head.get_data_dtype())
        return list(known.layout.sizes)
    img = _cifti_image(path)
    _check_payload(img, path)
    bm = img.header.get_axis(1)
    counts = [int(bm.nvertices.get(_CIFTI_NAMES[h], 0)) for h in HEMISPHERES]
    if all(counts) and isinstance(bm, cifti2.BrainModelAxis):
        _CIFTI_LAYOUTS.put(known.key, _layout_of(img, path))
    return counts


def _cifti_t_r(files: SubjectFiles) -> float | None:
    series = nib.load(str(files.paths[0])).header.get_axis(0)
    if not isinstance(series, cifti2.SeriesAxis) or series.step <= 0:
        return None
    scale = {"SECOND": 1.0, "MSEC": 1e-3}.get(str(series.unit).upper(), 1.0)
    return float(series.step) * scale


def _hemisphere_counts(files: SubjectFiles) -> list[int]:
    counts = []
    for hemi, p in zip(HEMISPHERES, files.paths, strict=True):
        img = load_image(p)
        if str(p).lower().endswith(".gii"):
            check_structure(img, hemi, p, f"subject {files.subject}: ")
            counts.append(int(img.darrays[0].data.shape[0]))
        else:
            _check_payload(img, p)
            counts.append(int(img.shape[0]))
    return counts


def check_structure(img: Any, hemi: str, path: Path, where: str = "") -> None:
    """A GIFTI that says which hemisphere it is (``AnatomicalStructurePrimary``, in the file's
    or its first array's metadata) must be the one it is given as."""
    meta = dict(img.meta or {})
    if img.darrays:
        meta = {**dict(img.darrays[0].meta or {}), **meta}
    structure = str(meta.get("AnatomicalStructurePrimary", ""))
    said = {"CortexLeft": "left", "CortexRight": "right"}.get(structure)
    if said is not None and said != hemi:
        raise ValueError(
            f"{where}{path} is given as the {hemi} hemisphere but its "
            f"AnatomicalStructurePrimary is {structure}: are left and right swapped?"
        )


def _load_hemispheres(files: SubjectFiles) -> tuple[np.ndarray, list[int]]:
    parts = [read_hemisphere(p) for p in files.paths]
    ts = {p.shape[1] for p in parts}
    if len(ts) != 1:
        raise ValueError(f"subject {files.subject}: hemispheres have different lengths {ts}.")
    return np.concatenate(parts, axis=0), [p.shape[0] for p in parts]


def _gifti_t_r(files: SubjectFiles) -> float | None:
    img = load_image(files.paths[0])
    step = img.darrays[0].meta.get("TimeStep") if img.darrays else None
    try:
        ms = float(step) if step is not None else 0.0
    except ValueError:
        return None
    return ms / 1000.0 if ms > 0 else None


def _gifti_timepoints(files: SubjectFiles) -> int:
    with open(files.paths[0], "rb") as f:
        head = f.read(1 << 16)
    found = re.search(rb'NumberOfDataArrays\s*=\s*"(\d+)"', head)
    if found:
        return int(found.group(1))
    return len(load_image(files.paths[0]).darrays)  # a header without the count: parse it


def _mgh_t_r(files: SubjectFiles) -> float | None:
    ms = float(nib.load(str(files.paths[0])).header["tr"])
    return ms / 1000.0 if ms > 0 else None


def _zarr_array(files: SubjectFiles) -> Any:
    import zarr

    return zarr.open_array(str(files.paths[0]), mode="r")


def _zarr_counts(files: SubjectFiles) -> list[int]:
    sizes: Any = _zarr_array(files).attrs.get("hemisphere_sizes")
    sizes = sizes or []
    return [int(n) for n in sizes]


def _zarr_t_r(files: SubjectFiles) -> float | None:
    tr: Any = _zarr_array(files).attrs.get("t_r")
    return float(tr) if tr else None


def _check_payload(img: Any, path: Any) -> None:
    """An uncompressed image shorter than its header promises is truncated: say so from the
    header, before the mask stage reads the data."""
    proxy: Any = getattr(img, "dataobj", None)
    offset = getattr(proxy, "offset", None)
    if offset is None or str(path).lower().endswith((".gz", ".mgz")):
        return
    _check_size(path, int(offset), proxy.shape, proxy.dtype)


def _check_size(path: Any, offset: int, shape: Any, dtype: Any) -> None:
    """An uncompressed file must hold ``shape`` values of ``dtype`` from ``offset`` on."""
    need = offset + int(np.prod(shape)) * np.dtype(dtype).itemsize
    have = os.path.getsize(path)
    if have < need:
        raise ValueError(
            f"{path} is truncated: its header describes {need} bytes, the file has {have}."
        )


#: input kind (:attr:`SubjectFiles.kind`) -> its reader. A new format is a row here (its
#: keys become valid in the pipeline file's subjects and globs)
READERS: dict[str, Reader] = {
    "cifti": Reader(
        ("cifti",), _cifti_counts, lambda f: _load_cifti(f.paths[0]), _cifti_t_r,
        lambda f: int(nib.load(str(f.paths[0])).shape[0]),
    ),
    "gifti": Reader(
        ("left", "right"), _hemisphere_counts, _load_hemispheres, _gifti_t_r, _gifti_timepoints,
        suffixes=(".gii",),
    ),
    "mgh": Reader(
        ("left", "right"), _hemisphere_counts, _load_hemispheres, _mgh_t_r,
        lambda f: int(nib.load(str(f.paths[0])).shape[-1]), exclude_suffixes=(".gii",),
    ),
    "zarr": Reader(
        ("zarr",), _zarr_counts, lambda f: read_zarr_subject(f.paths[0]), _zarr_t_r,
        lambda f: int(_zarr_array(f).shape[1]),
    ),
}  # fmt: skip
