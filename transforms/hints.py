"""Checked Beam resource hints for the heavy steps (training, tuning trials).

Example::

    hints = resource_hints("trainer", accelerator="type:nvidia-l4;count:1", min_ram="16GB")
    step = beam.ParDo(fn).with_resource_hints(**hints) if hints else beam.ParDo(fn)
"""

from __future__ import annotations

from typing import Optional

from apache_beam.transforms import resources

from beam_pipeline.core.errors import PipelineError

__all__ = ["resource_hints"]


def resource_hints(
    flag_prefix: str, accelerator: Optional[str] = None, min_ram: Optional[str] = None
) -> dict[str, str]:
    """The hints that are set, each checked by Beam's own parser.

    Args:
      flag_prefix: the flags' prefix for messages (``trainer`` -> ``--trainer_min_ram``).

    Raises:
      PipelineError: a value Beam does not accept, naming the flag and a valid example.
    """
    hints = {k: v for k, v in (("accelerator", accelerator), ("min_ram", min_ram)) if v}
    for name, value in hints.items():
        try:
            resources.parse_resource_hints({name: value})
        except ValueError as e:
            raise PipelineError(
                f"--{flag_prefix}_{name} {value!r} is not a valid Beam resource hint ({e}); use "
                f"e.g. --{flag_prefix}_min_ram=16GB or "
                f"--{flag_prefix}_accelerator='type:nvidia-l4;count:1;install-nvidia-driver'."
            ) from None
    return hints
