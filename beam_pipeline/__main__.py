"""``python -m beam_pipeline``: see :mod:`beam_pipeline.cli`."""

import sys

from beam_pipeline.cli import main

if __name__ == "__main__":
    sys.exit(main())
