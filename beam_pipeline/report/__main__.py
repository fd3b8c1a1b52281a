"""``python -m beam_pipeline.report RUN_DIR``: (re)writes a run directory's report.html.

For a run made before reports existed, or to render again after an artifact was added;
a run writes its own at its end. Prints the report's path; exit 2 when RUN_DIR is not a
folder or the report cannot be written.
"""

from __future__ import annotations

import sys

from beam_pipeline.console import OutputConfig, RunLog
from beam_pipeline.core import fileio
from beam_pipeline.report import write_report


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m beam_pipeline.report RUN_DIR", file=sys.stderr)
        return 2
    with RunLog(OutputConfig()):  # quiet: TensorFlow loads to read the artifacts
        return _write(argv[0])


def _write(run_dir: str) -> int:
    if not fileio.isdir(run_dir):
        print(
            f"error: {run_dir} is not a folder; pass a run directory "
            "(<pipeline_root>/runs/<run_id>).",
            file=sys.stderr,
        )
        return 2
    path = write_report(run_dir)
    if path is None:
        print(f"error: the report of {run_dir} could not be written (see above).", file=sys.stderr)
        return 2
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
