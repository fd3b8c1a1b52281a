"""Serving export and its checks: a SavedModel whose ``serving_default`` takes serialized
tf.Examples, applies the tf.Transform graph and runs the model; warm start from one.

The tf.Transform graph is attached to the Keras 3 model as ``model.tft_layer`` so
``tf.saved_model.save`` tracks its assets and tables, as TFX's module files do; here as a
plain ``tf.Module`` (:func:`_transform_graph`), not tf.Transform's tf_keras layer.

Example::

    export_serving_model(model, tf_transform_output, fn_args.serving_model_dir,
                         raw_label_keys=("species",))
    check_serving_model(fn_args.serving_model_dir, module_file="my_module.py")
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Optional

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError, first_line

if TYPE_CHECKING:
    import keras
    import tensorflow as tf
    import tensorflow_transform as tft

__all__ = [
    "SERVING_SIGNATURE",
    "TRANSFORM_FEATURES_SIGNATURE",
    "raw_feature_spec",
    "model_input_names",
    "export_serving_model",
    "check_serving_model",
    "check_base_model",
    "warm_start",
]

SERVING_SIGNATURE = "serving_default"
# The signature TFX's penguin example exports beside serving_default: serialized raw
# tf.Examples (label included) in, the transformed features out. The Evaluator names it in
# TFMA's ``preprocessing_function_names`` so the label is compared in model space (a
# vocabulary id) although the raw label is a string.
TRANSFORM_FEATURES_SIGNATURE = "transform_features"


def raw_feature_spec(
    tf_transform_output: tft.TFTransformOutput, schema_path: Optional[str] = None
) -> dict:
    """The raw features' parsing spec: from the transform graph, else from ``schema_path``."""
    try:
        return dict(tf_transform_output.raw_feature_spec())
    except OSError:
        if schema_path is None:
            raise
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2
    from tensorflow_transform.tf_metadata import schema_utils

    schema = text_format.Parse(fileio.read_file(schema_path), schema_pb2.Schema())
    return dict(schema_utils.schema_as_feature_spec(schema).feature_spec)


def model_input_names(model: keras.Model) -> Optional[list[str]]:
    """The input names of a model with dict inputs (a functional model), else None."""
    try:
        inputs = model.input
    except (AttributeError, ValueError):  # a subclassed model has no symbolic inputs
        return None
    return list(inputs) if isinstance(inputs, Mapping) else None


def _float32(tensor):
    """A mixed-precision model's float16/bfloat16 output as float32: what a server expects
    of the same model trained without ``--mixed_precision``."""
    import tensorflow as tf

    if tensor.dtype in (tf.float16, tf.bfloat16):
        return tf.cast(tensor, tf.float32)
    return tensor


def export_serving_model(
    model: keras.Model,
    tf_transform_output: tft.TFTransformOutput,
    serving_model_dir: str,
    *,
    raw_label_keys: Sequence[str] = (),
    outputs: Optional[Callable[[tf.Tensor], Mapping[str, tf.Tensor]]] = None,
    schema_path: Optional[str] = None,
    label_key: Optional[str] = None,
) -> str:
    """Saves ``model`` with a ``serving_default`` signature over serialized tf.Examples.

    A second signature, ``transform_features``, returns the transformed features of raw
    examples that still carry the label (for the Evaluator, as TFX's penguin example).

    Args:
      model: a Keras 3 model taking the transformed features (a dict).
      tf_transform_output: the run's tf.Transform output.
      serving_model_dir: where to write the SavedModel.
      raw_label_keys: raw features absent at serving time (the label).
      outputs: maps the model's output to the signature's outputs; default
        ``{"outputs": y}``.
      schema_path: the raw schema, used when the transform graph has no raw metadata.
      label_key: the transformed label feature, recorded in the SavedModel for the
        Evaluator's default EvalConfig; default: the one transformed feature that is not
        an input of the model (when there is exactly one).

    Returns:
      ``serving_model_dir``.
    """
    import tensorflow as tf

    full_spec = raw_feature_spec(tf_transform_output, schema_path)
    spec = {k: v for k, v in full_spec.items() if k not in raw_label_keys}
    names = model_input_names(model)
    to_outputs = outputs or (lambda y: {"outputs": y})
    # Attached as an attribute so the SavedModel tracks the transform graph's assets.
    model.tft_layer = _transform_graph(tf_transform_output)

    # autograph=False: these bodies have no control flow on tensors, and autograph would
    # transpile them and every function they call (the tf.Transform layer's, Keras')
    # from source, in each training process: most of the export's CPU.
    examples = [tf.TensorSpec([None], tf.string, name="examples")]

    @tf.function(input_signature=examples, autograph=False)
    def serve(serialized):
        parsed = tf.io.parse_example(serialized, spec)
        transformed = model.tft_layer(parsed)
        inputs = {k: transformed[k] for k in names} if names is not None else transformed
        return {k: _float32(v) for k, v in to_outputs(model(inputs, training=False)).items()}

    @tf.function(input_signature=examples, autograph=False)
    def transform_features(serialized):
        transformed = model.tft_layer(tf.io.parse_example(serialized, full_spec))
        # Signature outputs must be dense tensors.
        return {
            k: tf.sparse.to_dense(v) if isinstance(v, tf.sparse.SparseTensor) else v
            for k, v in transformed.items()
        }

    label = label_key if label_key is not None else _label_key(tf_transform_output, names)
    if label:
        # Read back by the Evaluator as the default EvalConfig's label (in model space);
        # a string variable is the one thing a SavedModel carries beside its signatures.
        model.evaluation_label_key = tf.Variable(label, trainable=False, dtype=tf.string)
    if raw_label_keys:
        # The raw label(s) it is computed from: the Evaluator reads their values in the
        # run's statistics (an integer label within {0, 1} is binary, beyond it regression).
        model.evaluation_raw_label_keys = tf.Variable(
            list(raw_label_keys), trainable=False, dtype=tf.string
        )
    tf.saved_model.save(
        model,
        serving_model_dir,
        signatures={SERVING_SIGNATURE: serve, TRANSFORM_FEATURES_SIGNATURE: transform_features},
    )
    return serving_model_dir


def _transform_graph(tf_transform_output: tft.TFTransformOutput) -> tf.Module:
    """The transform graph as a ``tf.Module`` called as tf.Transform's layer is called.

    Why not ``transform_features_layer()``: it is a tf_keras Model, and tf_keras saves the
    first of its models that it meets as the root of a Keras model: it traces the layer's
    call once more, with autograph transpiling tf.Transform's code from source, for a
    default signature nothing reads (most of an export's CPU). This module does what that
    layer does in eager mode: one ``SavedModelLoader``, its attributes tracked."""
    import tensorflow as tf
    from tensorflow_transform.saved import saved_transform_io_v2

    class TransformGraph(tf.Module):
        def __init__(self, transform_savedmodel_dir: str) -> None:
            super().__init__(name="transform_graph")
            self._loader = saved_transform_io_v2.SavedModelLoader(transform_savedmodel_dir)
            # Tracked as the layer tracks them: the loaded graph's tables and assets.
            self._saved_model_loader_tracked_dict = self._loader.__dict__

        def __call__(self, features):
            return self._loader.apply_transform_model(features)

    return TransformGraph(tf_transform_output.transform_savedmodel_dir)


def _label_key(
    tf_transform_output: tft.TFTransformOutput, input_names: Optional[list[str]]
) -> Optional[str]:
    """The one transformed feature the model does not take as input (its label), else None."""
    if input_names is None:
        return None
    try:
        transformed = set(tf_transform_output.transformed_feature_spec())
    except OSError:
        return None
    rest = sorted(transformed - set(input_names))
    return rest[0] if len(rest) == 1 else None


def check_serving_model(serving_model_dir: str, module_file: str = "the module file") -> list[str]:
    """Checks that ``serving_model_dir`` holds a loadable SavedModel with ``serving_default``.

    Returns:
      the SavedModel's signature names.

    Raises:
      PipelineError: no SavedModel there, it does not load, or it lacks serving_default.
    """
    import tensorflow as tf

    if not tf.saved_model.contains_saved_model(serving_model_dir):
        raise PipelineError(
            f"The trainer in {module_file} wrote no SavedModel to fn_args.serving_model_dir "
            f"({serving_model_dir}); end run_fn with tf.saved_model.save(model, "
            "fn_args.serving_model_dir, signatures={'serving_default': ...})."
        )
    try:
        loaded = tf.saved_model.load(serving_model_dir)
    except Exception as e:  # noqa: BLE001  any load failure is the same user-facing problem
        raise PipelineError(
            f"The SavedModel that {module_file} wrote to {serving_model_dir} does not load "
            f"({type(e).__name__}: {first_line(e)}); save it with "
            "tf.saved_model.save and check its signatures."
        ) from None
    names = sorted(loaded.signatures.keys())
    if SERVING_SIGNATURE not in names:
        raise PipelineError(
            f"The SavedModel that {module_file} wrote to {serving_model_dir} has no "
            f"'serving_default' signature (it has {names or 'none'}); pass "
            "signatures={'serving_default': serve_fn} to tf.saved_model.save."
        )
    return names


def check_base_model(base_model: str) -> None:
    """Raises PipelineError unless ``base_model`` is a SavedModel folder."""
    import tensorflow as tf

    if not tf.saved_model.contains_saved_model(base_model):
        raise PipelineError(
            f"--base_model {base_model} is not a SavedModel folder; pass the model/ folder "
            "of an earlier run."
        )


def warm_start(model: keras.Model, base_model: str) -> None:
    """Loads the weights of a SavedModel exported from the same architecture into ``model``.

    The SavedModel's variables are a checkpoint rooted at the exported model, so they are
    matched by their place in the model, not by name. Optimizer slots come along when the
    optimizer matches; its step counter is reset to 0, so ``train_steps`` counts afresh.

    Raises:
      PipelineError: ``base_model`` is not a SavedModel, or its variables do not fit.
    """
    import os

    import tensorflow as tf

    check_base_model(base_model)
    try:
        status = tf.train.Checkpoint(root=model).read(
            os.path.join(base_model, "variables", "variables")
        )
        status.expect_partial()
        status.assert_nontrivial_match()
    except (AssertionError, ValueError, tf.errors.OpError) as e:
        raise PipelineError(
            f"--base_model {base_model} does not fit this model "
            f"({(str(e).splitlines() or [type(e).__name__])[0]}); warm-start only from a model "
            "with the same architecture."
        ) from None
    optimizer = getattr(model, "optimizer", None)
    if optimizer is not None:
        optimizer.iterations.assign(0)
