"""All file access: subject files (nibabel readers), Zarr split stores, work folders."""

from .zarr_store import SplitStore, SplitWriter, build_split, open_split, write_split

__all__ = ["SplitStore", "SplitWriter", "build_split", "open_split", "write_split"]
