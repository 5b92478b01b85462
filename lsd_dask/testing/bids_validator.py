"""The official BIDS validator (``bids-validator-deno``, a PyPI wheel) on a folder, as the
tests run it on the derivatives a run writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

__all__ = ["bids_validator_errors"]

#: the validator's command line, run by this interpreter (its script may not be on PATH)
_VALIDATOR = (
    "import sys; from bids_validator_deno import cli; sys.argv[0] = 'bids-validator'; "
    "sys.exit(cli())"
)


def bids_validator_errors(folder: str | Path) -> list[str]:
    """The validator's errors on ``folder``, one ``CODE: file`` line each (warnings are
    left out). Raises RuntimeError when the validator itself fails to run."""
    res = subprocess.run(
        [sys.executable, "-c", _VALIDATOR, "--format", "json", str(folder)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    try:
        found = json.loads(res.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(
            f"bids-validator-deno did not run (exit {res.returncode}): {res.stderr[-2000:]}"
        ) from None
    return [
        f"{issue['code']}: {issue.get('location', '')}"
        for issue in found["issues"]["issues"]
        if issue.get("severity") == "error"
    ]
