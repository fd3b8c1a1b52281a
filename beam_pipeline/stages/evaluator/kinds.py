"""What kind of model the Evaluator judges: the facts read from the SavedModel (its
signatures, outputs, recorded label) and the label's values in the run's statistics and
schema, from which the default EvalConfig picks its metrics (:class:`ModelKind`).

An integer label is not always a class id: a price passed through unchanged is an INT
column with values 326..18823, and TFMA's binary metrics refuse any label outside
[0, 1] (the Beam job fails on its first example). So the kind of a one-output model with
an integer label comes from the label's values: its class domain where tf.Transform
recorded one (a vocabulary), else the raw label's range in the statistics (or the
schema's domain): within {0, 1} it is binary, beyond it regression. Where neither says,
the run stops before the Evaluator's job with one sentence (cast the label, or pass
``--eval_config``).

Example::

    facts = model_facts(model_dir)
    kind = model_kind(facts, label_classes(graph, facts.label_key),
                      label_range(facts, statistics_files, schema))
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Sequence
from typing import TYPE_CHECKING, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line

if TYPE_CHECKING:
    from tensorflow_metadata.proto.v0 import schema_pb2

__all__ = [
    "ModelFacts",
    "ModelKind",
    "label_classes",
    "label_range",
    "model_facts",
    "model_kind",
    "prediction_key",
]


class ModelKind(str, enum.Enum):
    """The kinds of model the default EvalConfig has metrics for."""

    MULTI_CLASS = "multi-class"
    BINARY = "binary"
    REGRESSION = "regression"
    ONE_CLASS = "one-class"


@dataclasses.dataclass(frozen=True)
class ModelFacts:
    """What the default EvalConfig and its checks need from the SavedModel."""

    signatures: tuple[str, ...]
    label_key: Optional[str]
    outputs: dict[str, tuple[Optional[int], ...]]
    transformed_features: tuple[str, ...]
    # The label's dtype as the transform_features signature computes it ("int", "float",
    # "string"), None where the model does not compute it.
    label_dtype: Optional[str] = None
    # The raw features the label is computed from (export_serving_model's raw_label_keys,
    # recorded in the SavedModel); () in a model exported before they were recorded.
    raw_label_keys: tuple[str, ...] = ()


def model_facts(model_dir: str) -> ModelFacts:
    """Reads the SavedModel's signatures, outputs and recorded label from its files
    (``saved_model.pb`` and its variables' checkpoint), without loading it: TFMA loads it
    for the job, and a load here took as long again (its functions rebuilt, for names
    and shapes that the file states).

    Raises:
      PipelineError: the folder holds no SavedModel that these can be read from.
    """
    import tensorflow as tf
    from tensorflow.core.protobuf import saved_model_pb2

    from trainer.export import SERVING_SIGNATURE, TRANSFORM_FEATURES_SIGNATURE

    try:
        saved = saved_model_pb2.SavedModel.FromString(
            fileio.read_file(fileio.join(model_dir, "saved_model.pb"), binary=True)
        )
        (meta,) = [m for m in saved.meta_graphs if "serve" in m.meta_info_def.tags]
        nodes = meta.object_graph_def.nodes  # (none in a TF1 SavedModel)
        recorded = {c.local_name for c in nodes[0].children} if nodes else set()
        reader = None
        if recorded & {"evaluation_label_key", "evaluation_raw_label_keys"}:
            reader = tf.train.load_checkpoint(fileio.join(model_dir, "variables", "variables"))
        values = {
            name: reader.get_tensor(f"{name}/.ATTRIBUTES/VARIABLE_VALUE")
            for name in ("evaluation_label_key", "evaluation_raw_label_keys")
            if name in recorded
        }
    except Exception as e:  # noqa: BLE001  any read failure is the same user-facing problem
        raise PipelineError(
            f"The model in {model_dir} does not load ({type(e).__name__}: {first_line(e)}); "
            "rerun the Trainer (a new --run_id) so that it exports a SavedModel."
        ) from None
    signature_defs = meta.signature_def
    # (A TF2 SavedModel lists its initializer among them, which a load does not show.)
    signatures = tuple(sorted(s for s in signature_defs if not s.startswith("__saved_model")))
    outputs: dict[str, tuple[Optional[int], ...]] = {}
    if SERVING_SIGNATURE in signature_defs:
        for name, info in signature_defs[SERVING_SIGNATURE].outputs.items():
            outputs[name] = tuple(tf.TensorShape(info.tensor_shape).as_list())
    transformed: dict = {}
    if TRANSFORM_FEATURES_SIGNATURE in signature_defs:
        transformed = {
            name: tf.dtypes.as_dtype(info.dtype)
            for name, info in signature_defs[TRANSFORM_FEATURES_SIGNATURE].outputs.items()
        }
    label = values.get("evaluation_label_key")
    label_key = label.decode() if label is not None else None
    raw = values.get("evaluation_raw_label_keys")
    raw_label_keys = tuple(k.decode() for k in raw) if raw is not None else ()
    dtype = transformed.get(label_key)
    if dtype is None:
        label_dtype = None
    elif dtype.is_integer or dtype.is_bool:
        label_dtype = "int"
    elif dtype.is_floating:
        label_dtype = "float"
    else:
        label_dtype = "string"
    return ModelFacts(
        signatures=signatures,
        label_key=label_key,
        outputs=outputs,
        transformed_features=tuple(sorted(transformed)),
        label_dtype=label_dtype,
        raw_label_keys=raw_label_keys,
    )


def label_classes(transform_graph: str, label_key: Optional[str]) -> Optional[int]:
    """How many classes the transformed label ``label_key`` has, from the integer domain
    tf.Transform recorded for it (``compute_and_apply_vocabulary`` records one: 0, or -1
    for an unknown value, to the vocabulary's size - 1); None when it has none (a raw or
    float label) or there is no schema."""
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    path = fileio.join(transform_graph, "transformed_metadata", "schema.pbtxt")
    if not label_key or not fileio.exists(path):
        return None
    schema = text_format.Parse(fileio.read_file(path), schema_pb2.Schema())
    for feature in schema.feature:
        if feature.name == label_key and feature.HasField("int_domain"):
            domain = feature.int_domain
            if domain.HasField("min") and domain.HasField("max"):
                # Class ids count from 0; a vocabulary without OOV buckets records min -1,
                # its default value for an unknown string, which is no class.
                return int(domain.max - max(domain.min, 0) + 1)
    return None


def label_range(
    facts: ModelFacts,
    statistics_files: Sequence[str],
    schema: Optional[schema_pb2.Schema],
) -> Optional[tuple[float, float]]:
    """The smallest and largest value of the raw label the model's label is computed from
    (its recorded ``raw_label_keys``, else a raw feature of the label's own name): the
    schema's int or bool domain where it declares one, else the numeric statistics of
    ``statistics_files`` (a DatasetFeatureStatisticsList per split) over every split;
    None where neither has it (a string label, a label of several raw features)."""
    from tensorflow_metadata.proto.v0 import statistics_pb2

    from beam_pipeline.stages.common.feature_stats import feature_name

    raw = facts.raw_label_keys or ((facts.label_key,) if facts.label_key else ())
    if len(raw) != 1:
        return None
    name = raw[0]
    for feature in schema.feature if schema is not None else ():
        if feature.name != name:
            continue
        if feature.HasField("bool_domain"):
            return 0.0, 1.0
        domain = feature.int_domain
        if feature.HasField("int_domain") and domain.HasField("min") and domain.HasField("max"):
            return float(domain.min), float(domain.max)
    found: Optional[tuple[float, float]] = None
    for path in statistics_files:
        if not fileio.exists(path):
            continue
        stats = statistics_pb2.DatasetFeatureStatisticsList.FromString(
            fileio.read_file(path, binary=True)
        )
        for dataset in stats.datasets:
            for feature in dataset.features:
                if feature_name(feature) != name or not feature.HasField("num_stats"):
                    continue
                if feature.num_stats.common_stats.num_non_missing == 0:
                    continue
                low, high = feature.num_stats.min, feature.num_stats.max
                found = (low, high) if found is None else (min(found[0], low), max(found[1], high))
    return found


def model_kind(
    facts: ModelFacts,
    classes: Optional[int] = None,
    values: Optional[tuple[float, float]] = None,
) -> ModelKind:
    """The kind of model ``facts`` describe: two or more scores a multi-class classifier;
    one output a one-class classifier (a label with one class), a regressor (a float
    label, one the model does not compute, or an integer label whose class domain or
    ``values`` (:func:`label_range`) go beyond {0, 1}), else a binary classifier.

    Raises:
      PipelineError: a one-output model with an integer label whose values neither the
        transform graph nor the statistics nor the schema give (binary or regression?).
    """
    key = prediction_key(facts)
    shape = facts.outputs.get(key or next(iter(facts.outputs), ""), ())
    width = shape[-1] if shape and shape[-1] is not None else 1
    if classes == 1:
        return ModelKind.ONE_CLASS
    if width > 1:
        return ModelKind.MULTI_CLASS
    if facts.label_dtype != "int":
        return ModelKind.REGRESSION
    if classes is not None:
        return ModelKind.BINARY if classes == 2 else ModelKind.REGRESSION
    if values is None:
        raise PipelineError(
            f"The Evaluator cannot tell whether the model's integer label {facts.label_key!r} "
            "is a class (0 or 1) or a quantity: neither the statistics nor the schema give "
            "its values; cast it to float in preprocessing_fn for a regression (or use a "
            "vocabulary for classes), or pass --eval_config with the metrics to compute."
        )
    low, high = values
    return ModelKind.BINARY if low >= 0 and high <= 1 else ModelKind.REGRESSION


def prediction_key(facts: ModelFacts) -> str:
    if len(facts.outputs) > 1:
        return "scores" if "scores" in facts.outputs else sorted(facts.outputs)[0]
    return ""
