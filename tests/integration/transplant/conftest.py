"""Shared helpers for the transplant integration tests live beside the unit tests."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "plugins" / "module_utils"))
