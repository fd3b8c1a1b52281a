"""Beam flags: strict parsing and pipeline creation.

Beam's own ``PipelineOptions`` only warns about flags it does not know ("Discarding
unparseable args"); here an unknown flag is an error, so a typo never silently changes a
run. ``create_pipeline`` runs ``--runner=DirectRunner`` on Beam's FnApiRunner directly:
Beam's DirectRunner would first try the Prism runner, which downloads a binary at run
time and fails on an air-gapped machine before falling back.

Example::

    options = parse_beam_args(["--runner=DirectRunner", "--direct_running_mode=in_memory"])
    with create_pipeline(options) as p:
        ...
"""

from __future__ import annotations

from collections.abc import Sequence

import apache_beam as beam
from apache_beam.options import pipeline_options as po
from apache_beam.options.pipeline_options import PipelineOptions

from beam_pipeline.errors import PipelineError

__all__ = ["parse_beam_args", "create_pipeline", "is_direct", "unknown_beam_flags"]

_DIRECT_NAMES = {None, "", "DirectRunner", "direct", "SwitchingDirectRunner"}


def _all_option_classes() -> list[type]:
    seen, todo, out = set(), list(PipelineOptions.__subclasses__()), []
    while todo:
        cls = todo.pop()
        if cls in seen:
            continue
        seen.add(cls)
        out.append(cls)
        todo.extend(cls.__subclasses__())
    return out


def unknown_beam_flags(args: Sequence[str]) -> list[str]:
    """The flags in ``args`` that no Beam ``PipelineOptions`` class defines."""
    parser = po._BeamArgumentParser(allow_abbrev=False)  # pylint: disable=protected-access
    for cls in _all_option_classes():
        try:
            cls._add_argparse_args(parser)  # pylint: disable=protected-access
        except Exception:  # noqa: BLE001  an option class clashing with another; skip it
            continue
    _, unknown = parser.parse_known_args(list(args))
    return unknown


def parse_beam_args(args: Sequence[str]) -> PipelineOptions:
    """Builds ``PipelineOptions`` from Beam flags, refusing unknown ones.

    The DirectRunner defaults to ``--direct_running_mode=in_memory`` (fastest for small
    data); ``multi_threading`` is refused because it drops elements in Beam 2.77.

    Raises:
      PipelineError: a flag is unknown to both this tool and Beam, or a mode is unsafe.
    """
    unknown = unknown_beam_flags(args)
    if unknown:
        raise PipelineError(
            f"Unknown flag {unknown[0]!r} on the command line: it is neither a beam_pipeline "
            "flag nor a Beam pipeline option; check its spelling (every setting is "
            "--flag=value) or run with --help."
        )
    options = PipelineOptions(list(args))
    direct = options.view_as(po.DirectOptions)
    if direct.direct_running_mode == "multi_threading":
        raise PipelineError(
            "--direct_running_mode=multi_threading drops elements in Beam 2.77; use "
            "--direct_running_mode=in_memory or --direct_running_mode=multi_processing."
        )
    return options


def is_direct(options: PipelineOptions) -> bool:
    return options.view_as(po.StandardOptions).runner in _DIRECT_NAMES


def create_pipeline(options: PipelineOptions) -> beam.Pipeline:
    """A ``beam.Pipeline`` for ``options``; the DirectRunner skips the Prism attempt."""
    if not is_direct(options):
        return beam.Pipeline(options=options)
    from apache_beam.portability.api import beam_provision_api_pb2
    from apache_beam.runners.portability.fn_api_runner import fn_runner
    from apache_beam.runners.portability.portable_runner import JobServiceHandle

    # The same construction as Beam's SwitchingDirectRunner, minus its Prism attempt: the
    # workers of multi_processing mode receive the pipeline options through provision info.
    encoded = JobServiceHandle.encode_pipeline_options(options.get_all_options())
    provision_info = fn_runner.ExtendedProvisionInfo(
        beam_provision_api_pb2.ProvisionInfo(pipeline_options=encoded)
    )
    return beam.Pipeline(
        runner=fn_runner.FnApiRunner(provision_info=provision_info), options=options
    )
