"""The ``lsd-dask`` command line: a thin layer over the library."""

from __future__ import annotations

import click

from . import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"], "show_default": True})
@click.version_option(__version__, prog_name="lsd-dask")
def main() -> None:
    """Cortical parcellation from resting-state fMRI on Dask."""


@main.command()
@click.option("--parcels", default=30, help="Planted parcels in the synthetic study.")
@click.option(
    "--k", "ks", multiple=True, type=int, default=(10, 30), help="Cluster counts (repeat)."
)
@click.option("--seed", default=0, help="random_state for data and clustering.")
def demo(parcels: int, ks: tuple[int, ...], seed: int) -> None:
    """Cluster a built-in synthetic two-split study and print split-half scores."""
    from .pipeline.demo import run_demo

    run_demo(n_parcels=parcels, ks=tuple(ks), random_state=seed, log=click.echo)


if __name__ == "__main__":  # pragma: no cover
    main()
