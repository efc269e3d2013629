#!/usr/bin/env python3
"""Holds benchmark: the real BalanceActor + Store against a naive one-transaction-per-operation
engine over the same schema, and against the raw limit of the storage for the same rows
(holdbench/raw.py: `vs_raw_64`). See bench/README.md.

    python bench/holds.py --quick     # CI size, under 3 minutes on 2 cores
    python bench/holds.py --full      # longer, >= 1,000,000 operations
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))          # holdbench
sys.path.insert(0, str(HERE.parent))   # service

from holdbench.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
