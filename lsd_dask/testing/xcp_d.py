"""xcp_d's way of reading atlas datasets, for the tests that replay its atlas selection:
the entities it adds to pybids (its ``data/atlas_bids_config.json``), since pybids knows
neither ``tpl`` nor ``cohort``. Use as ``BIDSLayout(root, config=["bids", "derivatives",
XCP_D_ATLAS_CONFIG])``, then its query ``layout.get(atlas=NAME, suffix="dseg",
extension=...)``."""

from __future__ import annotations

from typing import Any

__all__ = ["XCP_D_ATLAS_CONFIG"]

XCP_D_ATLAS_CONFIG: dict[str, Any] = {
    "name": "atlas",
    "entities": [
        {"name": "template", "pattern": "[_/\\\\]+tpl-([a-zA-Z0-9+]+)", "directory": "{template}"},
        {"name": "cohort", "pattern": "[_/\\\\]+cohort-([a-zA-Z0-9+]+)", "directory": "{cohort}"},
    ],
}
