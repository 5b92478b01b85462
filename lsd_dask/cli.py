"""The ``lsd-dask`` command line: a thin layer over the library.

Settings precedence: defaults < the pipeline YAML < these flags.
"""

from __future__ import annotations

import logging
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from ._version import __version__
from .io.lock import FolderBusyError, LockSet
from .pipeline.settings.methods import METHODS

if TYPE_CHECKING:
    from .pipeline.settings.config import PipelineConfig


def _defaults() -> dict[str, Any]:
    from .pipeline.settings.reference import defaults

    return defaults()


#: the pipeline file's defaults, which the flags' help states
_DEFAULTS = _defaults()

#: errors that describe bad input or settings: shown as one line unless --debug
USER_ERRORS = (
    ValueError,
    FileNotFoundError,
    FileExistsError,
    NotADirectoryError,
    PermissionError,
    ConnectionError,
    ImportError,
    MemoryError,
    FolderBusyError,
    OSError,  # a full disk, a lost connection: the message names the path or the peer
)


class _Main(click.Group):
    """The command group; a user error prints one ``Error: ...`` line, not a traceback."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except Exception as err:
            storage = _storage_error(err)
            if ctx.params.get("debug") or not (storage or isinstance(err, USER_ERRORS)):
                raise
            text = " ".join(str(err).split())
            if storage:
                text = f"the object store could not be reached: {text}"
            # what the failed run abandoned (a storage client's pending coroutines) would
            # print "Exception ignored" tracebacks as the interpreter exits
            sys.unraisablehook = lambda unraisable: None
            raise click.ClickException(f"{text} (--debug shows the traceback)") from None


def _storage_error(err: BaseException) -> bool:
    """An error of the object-store clients (botocore's and aiohttp's connection errors are
    not OSError): a lost or unreachable S3 endpoint."""
    return any(c.__module__.split(".")[0] in _STORAGE_LIBRARIES for c in type(err).__mro__)


_STORAGE_LIBRARIES = frozenset({"botocore", "aiobotocore", "aiohttp", "s3fs", "gcsfs", "adlfs"})


def _pem_option(flag: str, help: str):
    """An option naming an existing PEM file (the TLS options; defined before use)."""
    return click.option(
        flag, type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None, help=help
    )


@click.group(
    cls=_Main,
    context_settings={"help_option_names": ["-h", "--help"], "show_default": True},
)
@click.version_option(__version__, prog_name="lsd-dask")
@click.option("--debug", is_flag=True, help="Show the full traceback of an error.")
@click.option("--quiet", is_flag=True, help="Print warnings and errors only (no progress).")
def main(debug: bool, quiet: bool) -> None:
    """Cortical parcellation from resting-state fMRI on Dask."""
    # the library's lines are `logging` records under "lsd_dask": the CLI sets their level,
    # and stamps them with the time (a batch log shows when each step ended)
    logger = logging.getLogger("lsd_dask")
    logger.setLevel(logging.WARNING if quiet else logging.INFO)
    for handler in logger.handlers:
        handler.setFormatter(_Stamped("%(asctime)s %(message)s", "%H:%M:%S"))
    if not debug:
        # a task that fails on a worker thread of this process would print its traceback
        # here; the error itself ends the run as one line (--debug shows both)
        logging.getLogger("distributed.worker").addFilter(_drop_compute_failed)


class _Stamped(logging.Formatter):
    """Lines behind their time; a blank line stays blank."""

    def format(self, record: logging.LogRecord) -> str:
        return super().format(record) if record.getMessage() else ""


def _drop_compute_failed(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Compute Failed")


class _Labels(click.Option):
    """An option that takes every label after it up to the next option, as BIDS Apps take
    ``--participant-label 01 02 03``; it may also be repeated, or given commas."""

    def add_to_parser(self, parser: Any, ctx: click.Context) -> None:
        super().add_to_parser(parser, ctx)
        option = parser._long_opt[self.opts[0]]  # click's parser: no public hook for this
        store = option.process

        def process(value: Any, state: Any) -> None:
            values = [value]
            # labels are letters and digits (with sub-, or commas between): a pipeline
            # file's name or another option ends them
            while state.rargs and _LABELS.fullmatch(state.rargs[0]):
                values.append(state.rargs.pop(0))
            store(" ".join(values), state)

        option.process = process


_LABELS = re.compile(r"(sub-)?[A-Za-z0-9]+(,(sub-)?[A-Za-z0-9]+)*,?")


@main.command()
@click.argument("pipeline", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option(
    "--bids",
    "bids_root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="An fMRIPrep derivatives folder to take the subjects from (the `bids:` section; "
    "with no PIPELINE, the run's only input).",
)
@click.option(
    "--participant-label",
    "participant_labels",
    cls=_Labels,
    multiple=True,
    help="With --bids: participants to run, with or without sub-, separated by spaces as "
    "BIDS Apps take them (or commas; default: all).",
)
@click.option(
    "--task",
    default=None,
    help="With --bids: the BOLD files' task entity (needed when they hold more than one "
    "task; default: the one they hold).",
)
@click.option(
    "--bids-filter-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="With --bids: a JSON file whose `bold` query chooses the runs by their entities, as "
    'fMRIPrep\'s, e.g. {"bold": {"session": "1", "direction": "AP"}} (the `bids:` keys).',
)
@click.option(
    "--space",
    default=None,
    help="With --bids: the BOLD files' space entity (default: fsLR, fMRIPrep's CIFTI).",
)
@click.option("--den", default=None, help="With --bids: the BOLD files' den entity (default: any).")
@click.option(
    "--denoise",
    default=None,
    help="Denoising by nilearn's load_confounds on fMRIPrep's confounds: a preset (simple, "
    "scrubbing, compcor) or strategies separated by commas, e.g. "
    "motion,wm_csf,scrub,high_pass (`preprocess.denoise`; default: none).",
)
@click.option(
    "--nonfinite",
    type=click.Choice(["error", "mask"]),
    default=None,
    help="NaN or inf in the data: fail naming the subject, or mask those vertices (as "
    "fMRIPrep's --medial-surface-nan writes the medial wall; overrides `nonfinite`; default "
    f"{_DEFAULTS['nonfinite']}).",
)
@click.option(
    "--cluster",
    "cluster_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A cluster_configs/*.yaml to run on (overrides the pipeline's `cluster`; default: "
    "a local cluster of this machine's cores).",
)
@click.option(
    "--scheduler", default=None, help="Address of a running Dask scheduler (default: none)."
)
@_pem_option("--tls-ca-file", "CA certificate (PEM) of a tls:// scheduler.")
@_pem_option("--tls-cert", "Client certificate (PEM) for a tls:// scheduler.")
@_pem_option("--tls-key", "Client private key (PEM) for a tls:// scheduler.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Output folder (overrides the pipeline's `output`; default "
    f"{_DEFAULTS['output']} beside the pipeline file, or here with --bids).",
)
@click.option(
    "--work",
    default=None,
    help="Work folder or fsspec URL the workers share, e.g. s3://bucket/run/work "
    "(overrides `work`; default <output>/work).",
)
@click.option(
    "--adopt-folders",
    "adopt",
    is_flag=True,
    help="Write into an output or work folder that holds files no lsd-dask run wrote "
    "(refused otherwise): they are kept, and none is removed.",
)
@click.option(
    "--k",
    "ks",
    multiple=True,
    type=int,
    help=f"Cluster counts (repeat; overrides `ks`; default {_DEFAULTS['ks']}).",
)
@click.option(
    "--method",
    "methods",
    multiple=True,
    type=click.Choice(list(METHODS)),
    help="Methods (repeat; overrides `methods`): "
    + ", ".join(f"{name} ({m.summary})" for name, m in METHODS.items())
    + ". A name runs the method with no spatial option; a file without `methods` runs "
    "directional_merged (directional, spatial_weight 1, oversegment 2: one fine fit per "
    "split for every K).",
)
@click.option(
    "--rank",
    type=int,
    default=None,
    help=f"SVD rank (overrides `svd.rank`; default {_DEFAULTS['svd']['rank']}).",
)
@click.option(
    "--spins",
    type=int,
    default=None,
    help="Spins per parcellation for the held-out measures' z (overrides `spins`; default "
    f"{_DEFAULTS['spins']}; 0: none, for a quick first look).",
)
@click.option(
    "--svd-method",
    type=click.Choice(["randomized", "streaming"]),
    default=None,
    help=f"Group SVD algorithm (overrides `svd.method`; default {_DEFAULTS['svd']['method']}).",
)
def run(
    pipeline: Path | None,
    bids_root: Path | None,
    participant_labels: tuple[str, ...],
    task: str | None,
    bids_filter_file: Path | None,
    space: str | None,
    den: str | None,
    denoise: str | None,
    nonfinite: str | None,
    cluster_file: Path | None,
    scheduler: str | None,
    tls_ca_file: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
    out: Path | None,
    work: str | None,
    adopt: bool,
    ks: tuple[int, ...],
    methods: tuple[str, ...],
    rank: int | None,
    spins: int | None,
    svd_method: str | None,
) -> None:
    """Run the split-half parcellation pipeline described by PIPELINE (YAML), or on the
    fMRIPrep folder given by --bids with every other setting at its default."""
    from .pipeline import load_config
    from .pipeline.engine.context import work_lock

    if pipeline is None and bids_root is None:
        raise click.UsageError("give a PIPELINE file, or an fMRIPrep folder with --bids.")
    if pipeline is not None and not pipeline.is_file():
        raise FileNotFoundError(f"pipeline file {pipeline} does not exist.")
    # merged key by key into the file's svd section
    svd = {k: v for k, v in {"rank": rank, "method": svd_method}.items() if v is not None}
    bids = None
    if bids_root is not None:
        from .pipeline.settings.bids import read_filter_file

        labels = [x for item in participant_labels for x in item.replace(",", " ").split()]
        if participant_labels and not labels:
            raise click.UsageError(
                "--participant-label was given no label (an empty shell variable?); leave "
                "the option out to run every participant."
            )
        chosen = read_filter_file(bids_filter_file) if bids_filter_file else {}
        entities = {"task": task, "space": space, "den": den}
        bids = {
            "root": str(bids_root.resolve()),
            "participant_label": labels,
            **chosen,
            **{k: v for k, v in entities.items() if v is not None},
        }
    elif participant_labels or task or space or den or bids_filter_file:
        raise click.UsageError(
            "--participant-label, --task, --bids-filter-file, --space and --den go with --bids."
        )
    cfg = load_config(
        pipeline,
        bids=bids,
        nonfinite=nonfinite,
        preprocess_denoise=denoise,
        output=str(out.resolve()) if out else None,
        ks=list(ks) or None,
        methods=list(methods) or None,
        svd=svd or None,
        spins=spins,
        work=work if work is None or "://" in work else str(Path(work).resolve()),
    )
    if scheduler is None and _serve_slurm_task(cluster_file, cfg.cluster):
        return  # this SLURM task was the scheduler or a worker of the run
    # the work folder's lock first: a second run into it fails before reading anything
    with work_lock(cfg, _command_line(), adopt=adopt) as lock:
        _run_locked(cfg, lock, cluster_file, scheduler, tls_ca_file, tls_cert, tls_key)


def _serve_slurm_task(cluster_file: Path | None, cluster: Any) -> bool:
    """Under a ``slurm-runner`` cluster config, every SLURM task of the job runs this
    command: all but task 1 serve as the scheduler or a worker until the run ends, and
    never touch the output folder. True when this task did so."""
    from .distributed import load_cluster_config, serve_slurm_task, slurm_task_role

    target = load_cluster_config(cluster_file) if cluster_file else cluster
    if isinstance(target, str) and target.endswith((".yaml", ".yml")):
        target = load_cluster_config(target)
    if not isinstance(target, dict) or slurm_task_role(target) in (None, "client"):
        return False
    serve_slurm_task(target)
    return True


def _run_locked(
    cfg: PipelineConfig,
    lock: LockSet,
    cluster_file: Path | None,
    scheduler: str | None,
    tls_ca_file: Path | None,
    tls_cert: Path | None,
    tls_key: Path | None,
) -> None:
    """The run, with its work folder locked: preflight, connect, run."""
    from .distributed import connect
    from .pipeline import preflight, run_pipeline

    preflight(cfg)  # headers, meshes and settings, before any cluster starts
    target = scheduler or (str(cluster_file) if cluster_file else None) or cfg.cluster
    tls = {"tls_ca_file": tls_ca_file, "tls_client_cert": tls_cert, "tls_client_key": tls_key}
    if any(tls.values()) or (scheduler or "").startswith("tls://"):
        if scheduler is None or not all(tls.values()):
            raise ValueError(
                "a tls:// scheduler needs --scheduler with --tls-ca-file, --tls-cert and "
                "--tls-key together (or --cluster with a remote config's `security:`)."
            )
        security = {k: str(v) for k, v in tls.items()} | {"require_encryption": True}
        target = {"type": "remote", "remote": {"address": scheduler, "security": security}}
    with connect(target) as client:
        if client.cluster is not None and not click.get_current_context().find_root().params.get(
            "debug"
        ):
            # workers this command started print their failed tasks' tracebacks too; a
            # worker its nanny is restarting cannot answer, and the memory check names it
            client.run(_quiet_worker_logs, on_error="return")
        run_pipeline(cfg, command=_command_line(), lock=lock)


@main.command("config")
@click.option("--markdown", is_flag=True, help="The reference page (docs/pipeline_file.md).")
def config_command(markdown: bool) -> None:
    """Print a pipeline file of every key at its default, each with what it does."""
    from .pipeline.settings.reference import commented_defaults, markdown_reference

    click.echo(markdown_reference() if markdown else commented_defaults(), nl=False)


@main.command()
@click.argument("pipeline", type=click.Path(exists=True, dir_okay=False, path_type=Path))
def validate(pipeline: Path) -> None:
    """Check PIPELINE (YAML): its keys and values, the subjects' files and headers, the
    meshes; nothing is computed and no cluster starts."""
    from .pipeline import load_config, preflight

    cfg = load_config(pipeline)
    _, sizes = preflight(cfg)
    splits = cfg.resolved_splits()
    click.echo(
        f"{pipeline}: valid. {len(cfg.subjects)} subjects "
        f"({', '.join(f'{k}: {len(v)}' for k, v in splits.items())}), "
        f"{sizes[0]:,} + {sizes[1]:,} vertices, methods "
        f"{', '.join(m.name for m in cfg.methods)}, K {', '.join(map(str, cfg.ks))}; "
        f"outputs into {cfg.output}"
    )


def _quiet_worker_logs() -> None:
    """In a worker process: its "Compute Failed" records dropped (the run's error says it)."""
    logger = logging.getLogger("distributed.worker")
    if _drop_compute_failed not in logger.filters:
        logger.addFilter(_drop_compute_failed)


@main.command()
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("lsd_dask_demo"),
    help="Folder for the synthetic input and results.",
)
def demo(out: Path) -> None:
    """Run the whole pipeline on a built-in synthetic two-split study (no download)."""
    from .pipeline import run_demo

    run_demo(out)


@main.command()
@click.argument("folder", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["gifti", "cifti", "zarr", "fmriprep"]),
    default=None,
    help="File format of the time series: gifti, cifti, zarr, or fmriprep (a BIDS tree as "
    "fMRIPrep writes it, with confounds, run by its pipeline file's `bids:`). Default: "
    "gifti, and HCP-layout cifti with --template.",
)
@click.option(
    "--frequency",
    default=57,
    help="Icosphere frequency per hemisphere: 57 gives 2 x 32,492 vertices (32k_fs_LR).",
)
@click.option("--parcels", default=200, help="Planted parcels.")
@click.option("--subjects", default=33, help="Subjects per split.")
@click.option("--timepoints", default=1000, help="Time points per subject.")
@click.option("--seed", default=0, help="random_state.")
@click.option(
    "--template",
    type=click.Choice(["conte69"]),
    default=None,
    help="A realistic study on a real template instead of icospheres: the conte69 32k_fs_LR "
    "mesh, a Vos de Wael atlas (--parcels 100-400) as the truth, HCP group connectivity, "
    "HCP-layout CIFTI (needs lsd-dask[templates]).",
)
@click.option(
    "--atlas",
    type=click.Choice(["vosdewael", "schaefer"]),
    default="vosdewael",
    help="Truth atlas with --template.",
)
@click.option("--snr", default=0.5, help="Signal-to-noise variance ratio with --template.")
def synth(
    folder: Path,
    fmt: str | None,
    frequency: int,
    parcels: int,
    subjects: int,
    timepoints: int,
    seed: int,
    template: str | None,
    atlas: str,
    snr: float,
) -> None:
    """Write a synthetic study (files, meshes, pipeline.yaml) to FOLDER."""
    from .pipeline import synthesize, synthesize_realistic

    if template is not None:
        fmt = fmt or "cifti"
        path = synthesize_realistic(
            folder,
            fmt=fmt,
            template=template,
            atlas=atlas,
            scale=parcels,
            n_subjects=(subjects, subjects),
            n_timepoints=timepoints,
            snr=snr,
            random_state=seed,
            log=click.echo,
        )
        click.echo(f"pipeline file: {path}")
        return
    path = synthesize(
        folder,
        frequency=frequency,
        n_parcels=parcels,
        n_subjects=(subjects, subjects),
        n_timepoints=timepoints,
        fmt=fmt or "gifti",
        random_state=seed,
        medial_wall_fraction=0.08,
        log=click.echo,
    )
    click.echo(f"pipeline file: {path}")


def _command_line() -> str:
    """The command that runs (for the report and dataset_description.json), rebuilt from
    click's parsed parameters: what was given, defaults left out."""
    import shlex

    ctx = click.get_current_context()
    words = ["lsd-dask", str(ctx.info_name)]
    for p in ctx.command.params:
        value = ctx.params.get(p.name)
        if isinstance(p, click.Argument):
            if value is not None:  # no pipeline file: --bids alone
                words.append(str(value))
        elif value not in (None, (), False) and value != p.default:
            for item in value if isinstance(value, tuple) else (value,):
                words += [p.opts[0]] if item is True else [p.opts[0], str(item)]
    return shlex.join(words)


if __name__ == "__main__":  # pragma: no cover
    main()
