"""The Trainer's section of the run report: its result (``model_run/training_result.json``)
and a curve per scalar Keras logged to TensorBoard (the event files in ``model_run/``),
read without TensorFlow."""

from __future__ import annotations

import logging
import math
import os
from typing import Any

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import ModelRun
from beam_pipeline.engine.report_sections import Fragment, ReportSection, ReportView

__all__ = ["training_section"]

_LOG = logging.getLogger(__name__)


def training_section(view: ReportView) -> ReportSection:
    section = ReportSection("training", "Training", artifacts=(ModelRun,))
    training, curves = None, {}
    with section.reading("the training curves"):
        root = view.path(ModelRun)
        if not fileio.exists(root):
            if not view.skipped("Trainer"):
                section.missing.append(
                    view.gone(ModelRun)
                    or "training curves: no model_run/ (the Trainer did not run)"
                )
        else:
            result = fileio.join(root, "training_result.json")
            if fileio.exists(result):
                training = view.read_json(ModelRun, "training_result.json")
            events = fileio.glob(fileio.join(root, "*", "events.out.tfevents.*")) + fileio.glob(
                fileio.join(root, "events.out.tfevents.*")
            )
            if not events:
                section.missing.append("training curves: no TensorBoard event files in model_run/")
            else:
                curves = _curves(root, events)
    values = {"data": {"training": training}, "plots": _plots(curves)}
    section.parts.append(Fragment("beam_pipeline.stages.trainer", "report.html", values))
    return section


def _curves(root: str, events: list[str]) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """tag -> run (``train``, ``validation``) -> [(step, value)] from the event files."""
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    curves: dict[str, dict[str, list[tuple[int, float]]]] = {}
    for path in sorted(events):
        run = os.path.basename(os.path.dirname(path))
        run = "train" if run == os.path.basename(root) else run
        for record in tfrecords(path):
            event = event_pb2.Event.FromString(record)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    number = float(value.simple_value)
                elif value.HasField("tensor") and value.tensor.dtype in (1, 2):  # float, double
                    array = tensor_util.make_ndarray(value.tensor)
                    if array.size != 1:
                        continue
                    number = float(array.reshape(()))
                else:
                    continue
                if math.isfinite(number):
                    curves.setdefault(value.tag, {}).setdefault(run, []).append(
                        (int(event.step), number)
                    )
    for runs in curves.values():
        for points in runs.values():
            points.sort()
    return curves


def _x_axis(tag: str) -> str:
    """The x axis of a TensorBoard scalar as Keras logged it: ``epoch_*`` per epoch,
    ``batch_*`` and ``*_vs_iterations`` per training step."""
    if tag.startswith("epoch_"):
        return "epoch"
    return "step"


def _plots(curves: dict[str, dict[str, list[tuple[int, float]]]]) -> dict[str, Any]:
    from beam_pipeline.core.svg import lines

    drawn = {
        tag: lines(
            runs,
            xlabel=_x_axis(tag),
            ylabel=tag.removeprefix("epoch_")
            .removeprefix("batch_")
            .removeprefix("evaluation_")
            .removesuffix("_vs_iterations"),
        )
        for tag, runs in sorted(curves.items())
    }
    single = {
        tag: all(len(points) == 1 for points in runs.values()) for tag, runs in curves.items()
    }
    return {"curves": drawn, "single_point_curves": single}


def _masked_crc(data: bytes) -> int:
    import google_crc32c

    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecords(path: str):
    """The records of a TFRecord file (TensorBoard's event files), each checked.

    Written out because every reader at hand imports TensorFlow (TensorFlow's, and
    TensorBoard's when TensorFlow is installed), several times what a `runs report`
    otherwise takes. Beam's ``_TFRecordUtil`` (the framing ``transforms.tfrecords`` writes
    with) has the same checks, but importing Beam would cost the command seconds too. The
    format: a little-endian 8-byte length, its masked CRC-32C, the
    record, its masked CRC-32C. Reading stops at a truncated or damaged record (a run
    killed while TensorBoard wrote), so the curves keep the points before it.
    """
    import struct

    with fileio.open(path, "rb") as f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            length, length_crc = struct.unpack("<QI", header)
            if _masked_crc(header[:8]) != length_crc:
                _LOG.warning("%s: a damaged record length; the curves stop there.", path)
                return
            record, footer = f.read(length), f.read(4)
            if len(record) < length or len(footer) < 4:
                return  # truncated: the writer was stopped
            if struct.unpack("<I", footer)[0] != _masked_crc(record):
                _LOG.warning("%s: a damaged record; the curves stop there.", path)
                return
            yield record
