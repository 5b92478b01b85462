import ctypes
import mmap
import os
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from nibabel import cifti2

from lsd_dask.io.surface_files import (
    SubjectFiles,
    load_mesh,
    load_subject,
    release_cache,
    timepoint_count,
    vertex_counts,
    write_dlabel,
    write_dtseries,
    write_func_gifti,
    write_label_gifti,
    write_surface_gifti,
)


@pytest.fixture
def data(tiny_meshes):
    sizes = [m.n_vertices for m in tiny_meshes.values()]
    x = np.random.default_rng(0).standard_normal((sum(sizes), 9)).astype(np.float32)
    return sizes, x


def test_cifti_dtseries_roundtrip(tmp_path, data):
    sizes, x = data
    p = write_dtseries(tmp_path / "s.dtseries.nii", x, sizes, tr=0.72)
    img = nib.load(str(p))
    assert isinstance(img.header.get_axis(1), cifti2.BrainModelAxis)
    assert img.header.get_axis(0).step == pytest.approx(0.72)
    y, s = load_subject(SubjectFiles.from_keys("s", cifti=p))
    assert s == sizes
    np.testing.assert_array_equal(y, x)
    assert timepoint_count(SubjectFiles.from_keys("s", cifti=p)) == x.shape[1]  # header only


def test_cifti_with_medial_wall_missing(tmp_path, data):
    sizes, x = data
    # a dtseries that leaves out some left-hemisphere vertices (as real CIFTI leaves out the
    # medial wall): those come back as zeros
    keep = np.ones(sizes[0], bool)
    keep[:5] = False
    bm = cifti2.BrainModelAxis.from_surface(np.flatnonzero(keep), sizes[0], name="CortexLeft")
    bm = bm + cifti2.BrainModelAxis.from_surface(np.arange(sizes[1]), sizes[1], name="CortexRight")
    cols = np.concatenate([x[: sizes[0]][keep], x[sizes[0] :]]).T
    img = cifti2.Cifti2Image(cols, header=(cifti2.SeriesAxis(0, 1, 9), bm))
    nib.save(img, str(tmp_path / "m.dtseries.nii"))
    y, _ = load_subject(SubjectFiles.from_keys("m", cifti=tmp_path / "m.dtseries.nii"))
    assert np.all(y[:5] == 0)
    np.testing.assert_array_equal(y[5:], x[5:])


def _nibabel_cortex(path):
    """The reference: nibabel's own data and brain-model axis, vertices × T."""
    img = nib.load(str(path))
    data = img.get_fdata()
    bm = img.header.get_axis(1)
    sizes = [int(bm.nvertices[n]) for n in bm.nvertices]
    out, offset = np.zeros((sum(sizes), data.shape[0])), 0
    for (_, slc, model), n in zip(bm.iter_structures(), sizes, strict=True):
        out[offset + model.vertex] = data[:, slc].T
        offset += n
    return out, sizes


def _save_dtseries(path, x, sizes, left, dtype=np.float32, t_r=1.0):
    """A dtseries of ``x`` (vertices × T) with the left vertices ``left`` only, stored as
    ``dtype`` (integers: nibabel scales them)."""
    bm = cifti2.BrainModelAxis.from_surface(left, sizes[0], name="CortexLeft")
    bm = bm + cifti2.BrainModelAxis.from_surface(np.arange(sizes[1]), sizes[1], name="CortexRight")
    cols = np.concatenate([x[: sizes[0]][left], x[sizes[0] :]]).T
    img = cifti2.Cifti2Image(cols, header=(cifti2.SeriesAxis(0, t_r, x.shape[1]), bm))
    img.set_data_dtype(dtype)
    nib.save(img, str(path))
    return path


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int16])
def test_dtseries_with_a_header_read_before_read_as_nibabel_reads_them(
    tmp_path, data, dtype, monkeypatch
):
    """Subjects whose header has the bytes of one read before are read from its known
    layout (no XML parse): the same values as nibabel's own read, scaled integers
    included; a header with other bytes (other vertices) is parsed again."""
    from lsd_dask.io import surface_files

    monkeypatch.setattr(surface_files, "_CIFTI_LAYOUTS", surface_files._Recent())
    sizes, x = data
    rng = np.random.default_rng(1)
    every = np.arange(sizes[0])
    # the same values in another order: integers scaled alike, so the same header bytes
    shuffled = x[rng.permutation(x.shape[0])]
    paths = [
        _save_dtseries(tmp_path / f"{i}.dtseries.nii", v, sizes, every, dtype)
        for i, v in enumerate([x, shuffled])
    ]
    fewer = np.sort(rng.choice(sizes[0], sizes[0] - 4, replace=False))
    paths.append(_save_dtseries(tmp_path / "2.dtseries.nii", x, sizes, fewer, dtype))
    seen = []
    for p in paths:
        seen.append(surface_files._known_layout(p).layout is not None)
        got, got_sizes = load_subject(SubjectFiles.from_keys(p.stem, cifti=p))
        ref, ref_sizes = _nibabel_cortex(p)
        assert got.dtype == np.float32 and got_sizes == ref_sizes == sizes
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-6 * np.abs(ref).max())
        if dtype != np.int16:
            np.testing.assert_array_equal(got, ref.astype(np.float32))
    assert seen == [False, True, False]  # the second subject's header was known


def test_a_truncated_dtseries_with_a_known_header_says_so(tmp_path, data):
    """A file cut short whose header was parsed before: one line naming it, from the
    header check and from the read."""
    from lsd_dask.io import surface_files

    sizes, x = data
    good = _save_dtseries(tmp_path / "a.dtseries.nii", x, sizes, np.arange(sizes[0]))
    load_subject(SubjectFiles.from_keys("a", cifti=good))  # its layout is known now
    cut = tmp_path / "b.dtseries.nii"
    cut.write_bytes(good.read_bytes()[:-40])
    assert surface_files._known_layout(cut).layout is not None
    files = SubjectFiles.from_keys("b", cifti=cut)
    with pytest.raises(ValueError, match=r"b\.dtseries\.nii is truncated"):
        vertex_counts(files)
    with pytest.raises(ValueError, match=r"b\.dtseries\.nii is truncated"):
        load_subject(files)


def test_gifti_and_mgh_hemispheres(tmp_path, data):
    sizes, x = data
    write_func_gifti(tmp_path / "l.func.gii", x[: sizes[0]], hemisphere="left")
    write_func_gifti(tmp_path / "r.func.gii", x[sizes[0] :], hemisphere="right")
    files = SubjectFiles.from_keys("g", left=tmp_path / "l.func.gii", right=tmp_path / "r.func.gii")
    y, s = load_subject(files)
    np.testing.assert_array_equal(y, x)
    assert timepoint_count(files) == x.shape[1]  # NumberOfDataArrays, in the first bytes
    for hemi, part in (("lh", x[: sizes[0]]), ("rh", x[sizes[0] :])):
        nib.save(nib.MGHImage(part[:, None, None, :], np.eye(4)), str(tmp_path / f"{hemi}.mgz"))
    files = SubjectFiles.from_keys("m", left=tmp_path / "lh.mgz", right=tmp_path / "rh.mgz")
    assert files.kind == "mgh"
    y, s = load_subject(files)
    np.testing.assert_array_equal(y, x)
    assert s == sizes
    assert timepoint_count(files) == x.shape[1]


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        load_subject(SubjectFiles.from_keys("x", cifti=tmp_path / "nope.dtseries.nii"))


def test_label_files_open_in_nibabel(tmp_path, data):
    sizes, _ = data
    lab = np.random.default_rng(1).integers(0, 6, sum(sizes))
    p = write_dlabel(tmp_path / "p.dlabel.nii", lab, sizes)
    img = nib.load(str(p))
    lax, bm = img.header.get_axis(0), img.header.get_axis(1)
    assert isinstance(lax, cifti2.LabelAxis) and isinstance(bm, cifti2.BrainModelAxis)
    np.testing.assert_array_equal(np.asarray(img.dataobj)[0], lab)
    assert lax.label[0][0][0] == "???" and set(lax.label[0]) >= set(range(6))
    g = nib.load(
        str(write_label_gifti(tmp_path / "p.L.label.gii", lab[: sizes[0]], hemisphere="left"))
    )
    np.testing.assert_array_equal(g.darrays[0].data, lab[: sizes[0]])
    assert g.darrays[0].intent == nib.nifti1.intent_codes["NIFTI_INTENT_LABEL"]
    assert g.labeltable.get_labels_as_dict()[0] == "???"


def _dlabel_through_axes(path, labels, sizes, name, colours, vertices):
    """A dense label file as nibabel makes it from its axes: the reference."""
    from lsd_dask.io.surface_files import label_table

    lab = np.asarray(labels, np.int32)
    bm, cols, start = None, [], 0
    for hemi, n, structure in zip(
        ("left", "right"), sizes, ("CORTEX_LEFT", "CORTEX_RIGHT"), strict=True
    ):
        idx = np.arange(n) if vertices is None else np.asarray(vertices[hemi])
        part = cifti2.BrainModelAxis.from_surface(idx, n, name=f"CIFTI_STRUCTURE_{structure}")
        bm = part if bm is None else bm + part
        cols.append(lab[start + idx])
        start += n
    lax = cifti2.LabelAxis([name], [label_table(int(lab.max()), colours=colours)])
    nib.save(cifti2.Cifti2Image(np.concatenate(cols)[None, :], header=(lax, bm)), str(path))
    return path


@pytest.mark.parametrize("subset", [False, True])
def test_dlabel_is_the_file_nibabel_makes_from_its_axes(tmp_path, data, subset):
    """The label files share one brain-model map per layout (built once, not per file):
    each is byte for byte the file nibabel writes from a label axis and a brain-model
    axis, for every vertex and for an input's own grayordinates (a medial wall left
    out), the second file of a layout as the first."""
    sizes, _ = data
    rng = np.random.default_rng(3)
    vertices = (
        {
            h: np.sort(rng.choice(n, n - 5, replace=False))
            for h, n in zip(("left", "right"), sizes, strict=True)
        }
        if subset
        else None
    )
    for i in range(2):
        lab = rng.integers(0, 7 + i, sum(sizes))
        colours = rng.random((lab.max() + 1, 3))
        got = write_dlabel(
            tmp_path / f"{i}.dlabel.nii", lab, sizes, name=f"m{i}", colours=colours,
            vertices=vertices,
        )  # fmt: skip
        ref = _dlabel_through_axes(
            tmp_path / f"r{i}.dlabel.nii", lab, sizes, f"m{i}", colours, vertices
        )
        assert got.read_bytes() == ref.read_bytes()
        back = nib.load(str(got))
        assert back.header.get_axis(1).size == (sum(sizes) - 10 if subset else sum(sizes))


def test_surface_roundtrip(tmp_path, tiny_meshes):
    m = tiny_meshes["right"]
    p = write_surface_gifti(tmp_path / "rh.surf.gii", m, hemisphere="right")
    back = load_mesh(p)
    np.testing.assert_allclose(back.vertices, m.vertices, atol=1e-4)
    np.testing.assert_array_equal(back.faces, m.faces)


def test_zarr_subject_roundtrip(tmp_path, data):
    from lsd_dask.io.surface_files import write_zarr_subject

    sizes, x = data
    p = write_zarr_subject(tmp_path / "s.zarr", x, sizes)
    y, s = load_subject(SubjectFiles.from_keys("z", zarr=p, time_slice=(2, 7)))
    assert s == sizes
    np.testing.assert_array_equal(y, x[:, 2:7])
    assert timepoint_count(SubjectFiles.from_keys("z", zarr=p)) == x.shape[1]
    assert timepoint_count(SubjectFiles.from_keys("z", zarr=p, time_slice=(2, 7))) == 5
    with pytest.raises(ValueError, match="time_slice"):
        load_subject(SubjectFiles.from_keys("z", zarr=p, time_slice=(5, 50)))


def _resident_pages(path: Path) -> tuple[int, int]:
    """(pages of ``path`` in the page cache, pages in all), by mincore(2) on a mapping."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [
        ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long
    ]  # fmt: skip
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = path.stat().st_size
    pages = -(-size // mmap.PAGESIZE)
    with open(path, "rb") as f:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, f.fileno(), 0)
        assert addr not in (None, ctypes.c_void_p(-1).value)
        try:
            vec = (ctypes.c_ubyte * pages)()
            assert libc.mincore(addr, size, vec) == 0, os.strerror(ctypes.get_errno())
        finally:
            libc.munmap(addr, size)
    return sum(v & 1 for v in vec), pages


def _files(path: Path) -> list[Path]:
    return sorted(f for f in path.rglob("*") if f.is_file()) if path.is_dir() else [path]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mincore(2) and fadvise")
@pytest.mark.parametrize("kind", ["cifti", "zarr"])
def test_release_cache_drops_a_subject_read_for_good(tmp_path, tiny_meshes, kind):
    from lsd_dask.io.surface_files import write_zarr_subject

    mounts = [line.split() for line in Path("/proc/mounts").read_text().splitlines()]
    fs = max((m for m in mounts if str(tmp_path).startswith(m[1])), key=lambda m: len(m[1]))
    if fs[2] in ("tmpfs", "ramfs"):
        pytest.skip(f"{fs[1]} is {fs[2]}: its pages are the file itself")
    sizes = [m.n_vertices for m in tiny_meshes.values()]
    t = -(-(8 << 20) // (4 * sum(sizes)))  # about 8 MB of float32
    x = np.random.default_rng(1).standard_normal((sum(sizes), t)).astype(np.float32)
    if kind == "cifti":
        p = write_dtseries(tmp_path / "s.dtseries.nii", x, sizes, tr=0.72)
        files = SubjectFiles.from_keys("s", cifti=p)
    else:
        p = write_zarr_subject(tmp_path / "s.zarr", x, sizes)
        files = SubjectFiles.from_keys("s", zarr=p)
    for f in _files(Path(p)):  # written back: the kernel drops clean pages only
        fd = os.open(f, os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    y, _ = load_subject(files)
    np.testing.assert_allclose(y, x, rtol=1e-6)
    before = [_resident_pages(f) for f in _files(Path(p))]
    total = sum(n for _, n in before)
    assert sum(r for r, _ in before) > 0.9 * total  # just written and read: in the cache
    assert release_cache(files) == len(before)
    after = sum(r for r, _ in (_resident_pages(f) for f in _files(Path(p))))
    assert after <= 0.05 * total, f"{after} of {total} pages still cached"
    # the data are still there, read from the disk now
    np.testing.assert_array_equal(load_subject(files)[0], y)


def test_subject_files_kind_from_keys_and_one_line_errors(tmp_path):
    assert SubjectFiles.from_keys("a", cifti=tmp_path / "a.dtseries.nii").kind == "cifti"
    g = SubjectFiles.from_keys("a", left=tmp_path / "a.L.func.gii", right=tmp_path / "a.R.func.gii")
    assert g.kind == "gifti" and g.paths == (tmp_path / "a.L.func.gii", tmp_path / "a.R.func.gii")
    assert SubjectFiles.from_keys("a", zarr=tmp_path / "a.zarr").kind == "zarr"
    with pytest.raises(ValueError, match=r"^subject a: give one of .*left\+right.*got \['left'\]"):
        SubjectFiles.from_keys("a", left=tmp_path / "a.L.func.gii")
    with pytest.raises(ValueError, match="subject b: .* got none"):
        SubjectFiles.from_keys("b")


def test_a_new_format_is_one_reader(tmp_path, monkeypatch, data):
    """A format registered in READERS alone is read by the pipeline file's subjects entries
    (the config schema takes its keys from the readers) and by load_subject."""
    from lsd_dask.io.surface_files import READERS, Reader
    from lsd_dask.pipeline.settings.files import subjects as _subjects

    sizes, x = data
    np.save(tmp_path / "s1.npy", x)
    reader = Reader(
        ("npy",),
        vertex_counts=lambda f: list(sizes),
        load=lambda f: (np.load(f.paths[0]), list(sizes)),
        t_r=lambda f: None,
        timepoints=lambda f: int(np.load(f.paths[0], mmap_mode="r").shape[1]),
    )
    monkeypatch.setitem(READERS, "npy", reader)
    (files,) = _subjects({"subjects": [{"id": "s1", "npy": "s1.npy"}]}, tmp_path)
    assert files.kind == "npy" and files.paths == (tmp_path / "s1.npy",)
    y, s = load_subject(files)
    np.testing.assert_array_equal(y, x)
    assert timepoint_count(files) == x.shape[1]


def test_a_gifti_with_external_data_is_read_only_when_allowed(tmp_path, monkeypatch):
    import re

    import nibabel as nib

    from lsd_dask.io.surface_files import ALLOW_EXTERNAL_ENV, load_image

    values = np.arange(6, dtype=np.float32).reshape(3, 2)
    (tmp_path / "ext.bin").write_bytes(values.tobytes())
    array = nib.gifti.GiftiDataArray(values, datatype="NIFTI_TYPE_FLOAT32")
    text = nib.gifti.GiftiImage(darrays=[array]).to_xml().decode()
    text = re.sub(r'Encoding="[A-Za-z0-9]+"', 'Encoding="ExternalFileBinary"', text)
    text = re.sub(r'ExternalFileName="[^"]*"', f'ExternalFileName="{tmp_path / "ext.bin"}"', text)
    text = re.sub(r"<Data>[^<]*</Data>", "<Data></Data>", text)
    path = tmp_path / "x.func.gii"
    path.write_text(text)
    monkeypatch.delenv(ALLOW_EXTERNAL_ENV, raising=False)
    with pytest.raises(ValueError, match=r"x\.func\.gii keeps its data in an external file"):
        load_image(path)
    monkeypatch.setenv(ALLOW_EXTERNAL_ENV, "allow")
    np.testing.assert_array_equal(load_image(path).darrays[0].data, values)
