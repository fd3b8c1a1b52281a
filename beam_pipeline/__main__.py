"""``python -m beam_pipeline``: see :mod:`beam_pipeline.cli`.

The working directory is first on ``sys.path`` here, so before anything imports
``trainer`` or ``transforms``, :func:`beam_pipeline.shadowing.check_shadowing` makes sure
a folder of that name there does not take their place.
"""

import os
import sys

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.gpus import gpu_environment
from beam_pipeline.shadowing import check_shadowing

if __name__ == "__main__":
    gpu_environment(os.environ)  # before anything imports TensorFlow; children inherit it
    try:
        check_shadowing()
    except PipelineError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(e.exit_code)
    from beam_pipeline.cli import console_main  # imports trainer and transforms when it runs

    console_main()
