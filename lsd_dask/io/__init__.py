"""All file access: Zarr stores for out-of-core arrays (nibabel readers come later)."""

from .zarr_store import SplitStore, open_split, write_split

__all__ = ["SplitStore", "open_split", "write_split"]
