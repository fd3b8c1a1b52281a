"""What an ``Anomalies`` proto of validation says
(:func:`beam_pipeline.stages.validation.checks.validate_statistics`).

Whether it blocks the run, the one line that stops a run, and a readable summary per split
(the ``anomalies/summary.txt`` artifact and the run summary's note).

Example::

    if is_blocking(anomalies):
        raise PipelineError(f"... {blocking_anomalies({'eval': anomalies})} ...")
    print(format_anomalies("eval", anomalies))
"""

from __future__ import annotations

from collections.abc import Mapping

from tensorflow_metadata.proto.v0 import anomalies_pb2

__all__ = ["blocking_anomalies", "format_anomalies", "is_blocking"]

_Info = anomalies_pb2.AnomalyInfo


def is_blocking(anomalies: anomalies_pb2.Anomalies) -> bool:
    """Whether any anomaly (of a feature or of the whole split) is an ERROR.

    Args:
      anomalies: the result of :func:`validate_statistics`.

    Returns:
      True when the pipeline should stop before training.
    """
    return anomalies.dataset_anomaly_info.severity == _Info.ERROR or any(
        info.severity == _Info.ERROR for info in anomalies.anomaly_info.values()
    )


def blocking_anomalies(by_split: Mapping[str, anomalies_pb2.Anomalies]) -> str:
    """One line naming each split with blocking anomalies and its blocking features.

    For the message that stops a run: splits without blocking anomalies are left out, so
    the message never quotes a clean split.

    Args:
      by_split: split name -> the result of :func:`validate_statistics`.

    Returns:
      e.g. ``"split eval: color (Unexpected string values), score (Column dropped)"``;
      empty when nothing blocks.
    """
    parts = []
    for split, anomalies in by_split.items():
        items = []
        info = anomalies.dataset_anomaly_info
        if info.severity == _Info.ERROR:
            items.append(f"the split itself ({info.short_description})")
        for name in sorted(anomalies.anomaly_info):
            info = anomalies.anomaly_info[name]
            if info.severity == _Info.ERROR:
                items.append(f"{name} ({info.short_description})")
        if items:
            parts.append(f"split {split}: {', '.join(items)}")
    return "; ".join(parts)


def format_anomalies(split: str, anomalies: anomalies_pb2.Anomalies) -> str:
    """A readable summary: a header line, then one line per anomalous feature.

    Args:
      split: the split's name, for the header.
      anomalies: the result of :func:`validate_statistics`.

    Returns:
      The text, without a trailing newline.
    """
    infos = anomalies.anomaly_info
    has_dataset = anomalies.dataset_anomaly_info.severity != _Info.UNKNOWN
    if not infos and not has_dataset:
        return f"Split {split!r}: no anomalies."
    blocking = sum(info.severity == _Info.ERROR for info in infos.values())
    lines = [f"Split {split!r}: {len(infos)} anomalous feature(s), {blocking} blocking."]
    if has_dataset:
        info = anomalies.dataset_anomaly_info
        lines.append(
            f"  {_Info.Severity.Name(info.severity):<7} (split) "
            f"{info.short_description}: {info.description}"
        )
    for name in sorted(infos):
        info = infos[name]
        kinds = ",".join(_Info.Type.Name(r.type) for r in info.reason)
        lines.append(
            f"  {_Info.Severity.Name(info.severity):<7} {name}: "
            f"{info.short_description}: {info.description} [{kinds}]"
        )
    return "\n".join(lines)
