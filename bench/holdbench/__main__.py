"""`python -m holdbench` (from bench/, with the repository root importable)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from holdbench.cli import main  # noqa: E402

sys.exit(main())
