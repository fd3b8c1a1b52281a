"""A search space declared in the pipeline config (YAML), for a module without ``tuner_fn``.

Plain values, no TensorFlow: :mod:`beam_pipeline.config` reads the ``search_space`` section
into a :class:`SearchSpace` while the CLI still checks flags (before TensorFlow is imported);
keras-tuner is imported only when the space becomes ``HyperParameters``.

Example::

    space = SearchSpace.from_mapping(yaml.safe_load(text)["search_space"])
    space.algorithm, space.hyperparameters()     # SearchAlgorithm.BAYESIAN, HyperParameters
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.core.errors import PipelineError

if TYPE_CHECKING:
    import keras_tuner

__all__ = ["Direction", "ParameterType", "SearchAlgorithm", "SearchParameter", "SearchSpace"]


class ParameterType(str, enum.Enum):
    """Kinds of hyperparameters a config-declared search space has (a parameter's ``type:``).

    CATEGORICAL: ``hp.Choice`` over ``values``; INT / FLOAT: ``hp.Int`` / ``hp.Float`` over
    ``min``..``max``.
    """

    CATEGORICAL = "categorical"
    INT = "int"
    FLOAT = "float"


class SearchAlgorithm(str, enum.Enum):
    """The keras-tuner tuner a config-declared search space runs with (``algorithm:``).

    RANDOM: RandomSearch, GRID: GridSearch, BAYESIAN: BayesianOptimization (each up to
    ``max_trials``), HYPERBAND: Hyperband (its brackets over ``max_epochs`` decide).
    """

    RANDOM = "random"
    GRID = "grid"
    BAYESIAN = "bayesian"
    HYPERBAND = "hyperband"


class Direction(str, enum.Enum):
    """Whether the objective is minimized or maximized (``direction:``).

    Optional for the metrics keras-tuner knows (``val_loss``, ``val_accuracy``...).
    """

    MIN = "min"
    MAX = "max"


@dataclasses.dataclass(frozen=True)
class SearchParameter:
    """One hyperparameter of a config-declared search space.

    Attributes:
      name: the name the model reads (``hp.get(name)``).
      type: CATEGORICAL (``values``), INT or FLOAT (``min``..``max``, inclusive).
      values: the choices of a categorical hyperparameter.
      min / max / step: the range of an int or float one (``step`` optional).
      log: sample the range log-uniformly (``min`` must be above 0).
    """

    name: str
    type: ParameterType
    values: tuple[Any, ...] = ()
    min: Optional[float] = None
    max: Optional[float] = None
    step: Optional[float] = None
    log: bool = False

    def register(self, hp: keras_tuner.HyperParameters) -> None:
        """Declares this hyperparameter in ``hp``."""
        sampling = "log" if self.log else "linear"
        if self.type is ParameterType.CATEGORICAL:
            hp.Choice(self.name, list(self.values))
        elif self.type is ParameterType.INT:
            step = int(self.step) if self.step else None
            hp.Int(self.name, int(self.min), int(self.max), step=step, sampling=sampling)
        else:
            hp.Float(self.name, self.min, self.max, step=self.step, sampling=sampling)


_SPACE_KEYS = {"algorithm", "objective", "direction", "max_trials", "max_epochs", "seed"}
_PARAMETER_KEYS = {"type", "values", "min", "max", "step", "log"}


def _enum(kind: type[enum.Enum], value: Any, where: str):
    try:
        return kind(str(value).lower())
    except ValueError:
        names = ", ".join(m.value for m in kind)
        raise PipelineError(f"{where} is {value!r}; use one of: {names}.") from None


def _positive_int(value: Any, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise PipelineError(f"{where} is {value!r}; use a whole number of at least 1.")
    return value


@dataclasses.dataclass(frozen=True)
class SearchSpace:
    """A search space declared in the pipeline config, for a module without ``tuner_fn``.

    The module's :class:`trainer.TrainSpec` builds, compiles and trains each trial's model
    (``model`` / ``loss`` / ``optimizer`` / ``metrics``, ``train_dataset`` /
    ``eval_dataset``); its ``default_hyperparameters()`` values not in the space stay
    fixed, so the best hyperparameters hold every value the spec reads.

    Example (the ``search_space`` section of a pipeline YAML, as Determined's configs
    declare one)::

        search_space:
          algorithm: bayesian           # random | grid | bayesian | hyperband
          objective: val_sparse_categorical_accuracy
          direction: max                # optional for metrics keras-tuner knows
          max_trials: 8
          seed: 42
          hyperparameters:
            learning_rate: {type: float, min: 1.0e-4, max: 1.0e-1, log: true}
            num_layers: {type: int, min: 1, max: 3}
            units: {type: categorical, values: [8, 16, 32]}

    Attributes:
      parameters: the hyperparameters searched.
      algorithm: the keras-tuner oracle.
      objective / direction: the metric to optimize (``val_`` metrics need eval data).
      max_trials: the oracle's budget (Hyperband: its ``max_epochs`` and brackets decide).
      max_epochs: Hyperband's most epochs of ``train_steps`` steps for one model.
      seed: the oracle's seed.
    """

    parameters: tuple[SearchParameter, ...]
    algorithm: SearchAlgorithm = SearchAlgorithm.RANDOM
    objective: str = "val_loss"
    direction: Optional[Direction] = None
    max_trials: int = 10
    max_epochs: int = 3
    seed: Optional[int] = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], where: str = "search_space") -> SearchSpace:
        """Reads the config section shown in the class docstring.

        Raises:
          PipelineError: an unknown key or type, a missing or empty range, or a log range
            that reaches 0; the message names the key.
        """
        if not isinstance(data, Mapping):
            raise PipelineError(f"{where} is not a mapping; write it as in the docs' example.")
        unknown = set(data) - _SPACE_KEYS - {"hyperparameters"}
        if unknown:
            raise PipelineError(
                f"{where} has unknown key(s) {sorted(unknown)}; use "
                f"{sorted(_SPACE_KEYS | {'hyperparameters'})}."
            )
        declared = data.get("hyperparameters")
        if not isinstance(declared, Mapping) or not declared:
            raise PipelineError(
                f"{where}.hyperparameters is missing or empty; declare at least one, e.g. "
                "learning_rate: {type: float, min: 1.0e-4, max: 1.0e-1, log: true}."
            )
        parameters = tuple(
            _parameter(str(name), spec, f"{where}.hyperparameters.{name}")
            for name, spec in declared.items()
        )
        direction = data.get("direction")
        seed = data.get("seed")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
            raise PipelineError(f"{where}.seed is {seed!r}; use a whole number.")
        return cls(
            parameters=parameters,
            algorithm=_enum(SearchAlgorithm, data.get("algorithm", "random"), f"{where}.algorithm"),
            objective=str(data.get("objective", "val_loss")),
            direction=None
            if direction is None
            else _enum(Direction, direction, f"{where}.direction"),
            max_trials=_positive_int(data.get("max_trials", 10), f"{where}.max_trials"),
            max_epochs=_positive_int(data.get("max_epochs", 3), f"{where}.max_epochs"),
            seed=seed,
        )

    def hyperparameters(self) -> keras_tuner.HyperParameters:
        """The space as keras-tuner ``HyperParameters``."""
        import keras_tuner

        hp = keras_tuner.HyperParameters()
        for parameter in self.parameters:
            parameter.register(hp)
        return hp


def _parameter(name: str, spec: Any, where: str) -> SearchParameter:
    if not isinstance(spec, Mapping):
        raise PipelineError(f"{where} is not a mapping; write e.g. {{type: int, min: 1, max: 3}}.")
    unknown = set(spec) - _PARAMETER_KEYS
    if unknown:
        raise PipelineError(
            f"{where} has unknown key(s) {sorted(unknown)}; use {sorted(_PARAMETER_KEYS)}."
        )
    kind = _enum(ParameterType, spec.get("type", ""), f"{where}.type")
    log = bool(spec.get("log", False))
    if kind is ParameterType.CATEGORICAL:
        values = spec.get("values")
        if not isinstance(values, (list, tuple)) or not values:
            raise PipelineError(f"{where}.values is missing or empty; list the choices.")
        return SearchParameter(name, kind, values=tuple(values))
    low, high, step = spec.get("min"), spec.get("max"), spec.get("step")
    number = int if kind is ParameterType.INT else (int, float)
    for key, value in (("min", low), ("max", high), ("step", step)):
        if (value is not None or key != "step") and (
            isinstance(value, bool) or not isinstance(value, number)
        ):
            wanted = "a whole number" if kind is ParameterType.INT else "a number"
            raise PipelineError(f"{where}.{key} is {value!r}; give {wanted}.")
    if low > high:
        raise PipelineError(f"{where} has min {low} above max {high}; swap them.")
    if log and low <= 0:
        raise PipelineError(f"{where} samples log-uniformly from min {low}; use a min above 0.")
    return SearchParameter(name, kind, min=low, max=high, step=step, log=log)
