"""The command line's flags: ``python -m beam_pipeline [flags] [Beam flags]`` to a config.

Our flags and an optional YAML ``--config`` (same keys as the flags, without ``--``) become
one frozen :class:`~beam_pipeline.engine.config.PipelineConfig`; flags given on the command
line win over the file. Every other flag must be a Beam pipeline option (``--runner``,
``--direct_running_mode``, ``--project``, ...) and is passed through to
``PipelineOptions``; a flag neither knows is an error.

The flags are not listed here: each is a :func:`~beam_pipeline.core.settings.setting` of
the run's config or of a stage's Config (declared in the stage's home, listed by
:data:`beam_pipeline.stages.graph.STAGE_GRAPH`), which gives its name, help, default,
parser and YAML key. With neither ``--data`` nor ``--config``, the bundled penguin example
runs.

Example::

    python -m beam_pipeline --runner=DirectRunner
    python -m beam_pipeline --data=data/ --module_file=my_module.py --runner=DirectRunner
    python -m beam_pipeline runs list   # the run history: see beam_pipeline.history

    config = parse_config(["--data=data/", "--runner=DirectRunner"])  # what cli.main runs
"""

from __future__ import annotations

import argparse
import enum
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional

from beam_pipeline.config import BUNDLED_CONFIG
from beam_pipeline.core.command import command_name
from beam_pipeline.core.errors import PipelineError
from beam_pipeline.core.settings import (
    Setting,
    expected_type,
    field_default,
    settings_of,
    type_name,
)
from beam_pipeline.engine.config import PipelineConfig
from beam_pipeline.stages.graph import STAGE_GRAPH, load_graph

if TYPE_CHECKING:
    from beam_pipeline.console import OutputConfig

__all__ = ["build_config", "build_parser", "parse_config", "parse_output", "flag_table"]


Table = dict[str, tuple[str, str, Setting, type]]


def flag_table(graph: Sequence[Any] = STAGE_GRAPH) -> Table:
    """Flag (its YAML key) -> (section key, field, Setting, the config class holding it),
    for the run's settings (section key "") and each stage's of ``graph``, in ``--help``
    order."""
    table: Table = {}
    holders: list[tuple[str, type]] = [("", PipelineConfig)]
    holders += [(s.config_key, s.Config) for s in graph if s.Config is not None]
    for key, cls in holders:
        for name, s in settings_of(cls, key):
            if s.flag in table:
                raise ValueError(f"two settings declare the flag --{s.flag}")
            table[s.flag] = (key, name, s, cls)
    return table


def _graph_of(argv: Sequence[str]) -> str:
    """The ``--graph`` ``argv`` names (read before the other flags, which its stages
    declare), or ""."""
    for i, arg in enumerate(argv):
        if arg == "--graph" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--graph="):
            return arg.split("=", 1)[1]
    return ""


# The table --help reads its defaults from: the graph build_parser was last asked for.
_TABLE: Table = flag_table()
# argparse's converter per kind of setting (the others take the text as it is).
_TYPES = {"int": int, "float": float}


def _add_setting(group, s: Setting, default: Any) -> None:
    """One flag, as its setting declares it."""
    if s.kind == "yaml":
        return  # a YAML mapping (--config), no flag
    if s.kind == "switch":
        if default is True:
            group.add_argument(f"--no_{s.flag}", dest=s.flag, action="store_false", help=s.help)
        else:
            group.add_argument(f"--{s.flag}", action="store_true", help=s.help)
        return
    extra: dict[str, Any] = {}
    if s.kind in _TYPES:
        extra["type"] = _TYPES[s.kind]
    if s.kind == "choice":
        extra["choices"] = list(s.choices)
    if s.kind == "optional":
        extra.update(nargs="?", const=s.const)
    if s.kind == "append":
        extra["action"] = "append"
    if s.metavar:
        extra["metavar"] = s.metavar
    group.add_argument(f"--{s.flag}", help=s.help, **extra)


def build_parser(graph: Sequence[Any] = STAGE_GRAPH) -> argparse.ArgumentParser:
    """The parser of beam_pipeline's own flags (Beam's flags are checked separately): one
    group for the run's settings and one per stage of ``graph``, from their declarations."""
    global _TABLE
    _TABLE = table = flag_table(graph)
    prog = command_name()
    p = argparse.ArgumentParser(
        prog=prog,
        usage="%(prog)s [flags] [Beam pipeline flags, e.g. --runner=DirectRunner]\n"
        "       %(prog)s runs {list,show,lineage,diff,report} ...",
        description="Run a TFX-style ML pipeline (ExampleGen, statistics, schema, validation, "
        "tf.Transform, tuning, training) as Apache Beam jobs. Any other --flag is passed to "
        "Beam's PipelineOptions (e.g. --runner, --direct_running_mode, --project).",
        epilog=f"The run history: {prog} runs list | show RUN | lineage URI | diff RUN_A "
        f"RUN_B | report RUN (see {prog} runs --help).",
        allow_abbrev=False,
        argument_default=argparse.SUPPRESS,
        formatter_class=_HelpFormatter,
    )
    a = p.add_argument
    a("--version", action=_Version, help="Print the version and exit.")
    a("--config", help="YAML file with the same settings as the flags (flags win).")
    a(
        "--graph",
        help="FILE.py:NAME or module:NAME: a stage graph of your own (the bundled stages "
        "and yours) to run instead of the bundled one.",
    )
    groups: dict[str, Any] = {}
    titles = {"": "pipeline"}
    titles.update({s.config_key: s.name for s in graph if s.config_key})
    for key, name, s, cls in table.values():
        if key not in groups:
            groups[key] = p.add_argument_group(titles.get(key, key))
        _add_setting(groups[key], s, field_default(cls, name))
    _add_output_flags(p.add_argument_group("output"))
    return p


class _Version(argparse.Action):
    """``--version``: the installed distribution's version (read only when asked)."""

    def __init__(self, option_strings, dest, **kwargs):
        kwargs.pop("default", None)
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        from importlib import metadata

        try:
            version = metadata.version("beam-pipeline")
        except metadata.PackageNotFoundError:  # a checkout on PYTHONPATH, not installed
            version = "(not installed)"
        print(f"beam-pipeline {version}")  # stdout, as argparse's own version action
        parser.exit()


def _config_default(dest: str) -> Any:
    """The default of the config field a flag sets (None: no single value to show)."""
    if dest not in _TABLE:
        return None
    _, name, _, cls = _TABLE[dest]
    return field_default(cls, name)


def _shown(value: Any) -> str:
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, tuple):
        return ",".join(
            f"{_shown(v[0])}={_shown(v[1])}" if isinstance(v, tuple) else _shown(v) for v in value
        )
    return str(value)


class _HelpFormatter(argparse.HelpFormatter):
    """Each flag's help ends with its default, read from the config dataclasses (their
    one home), unless the help says it already or the flag is a switch."""

    def _get_help_string(self, action):
        text = action.help or ""
        if "default" in text or action.nargs == 0:
            return text
        value = _config_default(action.dest)
        if value is None or value == "" or value == () or isinstance(value, bool):
            return text
        shown = _shown(value).replace("%", "%%")  # argparse %-formats help
        if shown == "":
            shown = "''"
        return f"{text[:-1] if text.endswith('.') else text} (default {shown})."


def _add_output_flags(g) -> None:
    g.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="Print every log line and warning (TensorFlow's, Beam's) on the terminal too.",
    )
    g.add_argument("--log_file", help="Where the run's full log goes (default <run_dir>/run.log).")
    g.add_argument(
        "--no_progress", dest="progress", action="store_false", help="No live progress lines."
    )


# Flags of how the run talks to the user: OutputConfig, not part of the run's identity.
_OUTPUT_FLAGS = ("verbose", "log_file", "progress")


def parse_output(argv: Sequence[str]) -> OutputConfig:
    """``-v/--verbose``, ``--log_file`` and ``--no_progress`` as an OutputConfig (flags
    only; every other flag, and a malformed one, is :func:`parse_config`'s to check)."""
    from beam_pipeline.console import OutputConfig  # a run's: --help needs it not

    parser = argparse.ArgumentParser(
        add_help=False, allow_abbrev=False, exit_on_error=False, argument_default=argparse.SUPPRESS
    )
    _add_output_flags(parser)
    try:
        args, _ = parser.parse_known_args(list(argv))
    except argparse.ArgumentError:
        return OutputConfig()
    given = vars(args)
    return OutputConfig(**{k: given[k] for k in _OUTPUT_FLAGS if k in given})


def _settings_loader() -> type:
    """PyYAML's safe loader without YAML 1.1's base-60 numbers: ``spans: 1:3`` is the text
    the user wrote, not 63 (YAML 1.2 dropped them; PyYAML implements 1.1)."""
    import re

    import yaml

    class Loader(yaml.SafeLoader):
        pass

    Loader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in _NUMBER_TAGS]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    # The int and float patterns of yaml.resolver less their base-60 branches.
    int_rx = re.compile(
        r"""^(?:[-+]?0b[0-1_]+|[-+]?0[0-7_]+|[-+]?(?:0|[1-9][0-9_]*)|[-+]?0x[0-9a-fA-F_]+)$""",
        re.X,
    )
    float_rx = re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$""",
        re.X,
    )
    Loader.add_implicit_resolver(_NUMBER_TAGS[0], int_rx, list("-+0123456789"))
    Loader.add_implicit_resolver(_NUMBER_TAGS[1], float_rx, list("-+0123456789."))
    return Loader


_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")


def _load_yaml(path: str, table: Table) -> dict[str, Any]:
    import yaml

    try:
        with open(path, encoding="utf-8") as f:
            raw = yaml.load(f, Loader=_settings_loader()) or {}
    except OSError as e:
        raise PipelineError(
            f"--config {path} cannot be read ({e.strerror}); pass an existing YAML file."
        ) from e
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        raise PipelineError(
            f"--config {path}{where} is not valid YAML; fix the syntax there."
        ) from e
    if not isinstance(raw, dict):
        raise PipelineError(
            f"--config {path} must hold a mapping of settings, e.g. 'data: file.csv'."
        )
    given_beam = raw.get("beam_args") or []
    if not isinstance(given_beam, list) or not all(isinstance(a, str) for a in given_beam):
        raise PipelineError(
            f"--config {path} gives beam_args {given_beam!r}, which is not a list of flags; "
            "write it as a list, e.g. beam_args: [--runner=DirectRunner]."
        )
    unknown = sorted(set(raw) - set(table) - {"beam_args"})
    if unknown:
        # Beam's options (runner: DirectRunner) as the file's own settings: passed on to
        # Beam like its beam_args list, before the command line's flags (which win).
        beam = _beam_settings(path, {k: raw.pop(k) for k in unknown}, table)
        raw["beam_args"] = beam + [str(a) for a in raw.get("beam_args") or []]
    base = os.path.dirname(os.path.abspath(path))
    for key in {f for f, (_, _, s, _) in table.items() if s.path} & set(raw):
        value = raw[key]
        if isinstance(value, str) and value and "://" not in value and not os.path.isabs(value):
            raw[key] = os.path.join(base, value)
    return raw


def _beam_settings(path: str, settings: dict[str, Any], table: Table) -> list[str]:
    """A config file's settings that are not ours, as Beam flags (``runner: X`` is
    ``--runner=X``, ``true`` the bare flag, a list one flag per item).

    Raises:
      PipelineError: a setting that is not a Beam pipeline option either.
    """
    import difflib

    from beam_pipeline.runtime.options import beam_option_names

    names = beam_option_names()
    args: list[str] = []
    for key, value in settings.items():
        if key not in names:
            close = difflib.get_close_matches(key, [*table, *names], n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise PipelineError(
                f"--config {path} has setting {key!r}, which is neither a beam_pipeline "
                f"setting nor a Beam pipeline option; {hint}Use the flag names without '--' "
                "(see --help)."
            )
        for item in value if isinstance(value, list) else [value]:
            if item is True:
                args.append(f"--{key}")
            elif item is not False and item is not None:
                args.append(f"--{key}={item}")
    return args


def _stage_names(graph: Sequence[Any]) -> tuple[tuple[str, ...], dict[str, str]]:
    """The graph's stage names, and each name as a user may write it (any case; a combined
    stage by each of its parts: ExampleGen, Statistics) -> the name."""
    every = tuple(s.name for s in graph)
    names = {n.lower(): n for n in every}
    for n in every:
        for part in n.split("+"):
            names.setdefault(part.lower(), n)
    return every, names


def _no_cache(value: Any, graph: Sequence[Any]) -> tuple[str, ...]:
    """``--no_cache``'s stages: all (the flag alone, ``true``), none, or a list of names."""
    every, names = _stage_names(graph)
    if value is True or str(value).strip().lower() == "all":
        return every
    if value is False or value is None:
        return ()
    items = value if isinstance(value, (list, tuple)) else str(value).split(",")
    stages: list[str] = []
    for item in items:
        stage = names.get(str(item).strip().lower())
        if stage is None:
            raise PipelineError(
                f"--no_cache names stage {str(item).strip()!r}, which is not one; pass all or "
                f"some of {','.join(every)} (or no value: all)."
            )
        if stage not in stages:
            stages.append(stage)
    return tuple(stages)


def stage_beam_args(value: Any, graph: Sequence[Any]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """``stage_beam_args`` as :class:`PipelineConfig` holds it: ((stage, (flag, ...)), ...),
    one entry per stage in graph order, each stage's flags in the order given.

    Args:
      value: a config file's mapping (``{Trainer: ["--machine_type=a2-highgpu-1g"]}``, a
        single flag as a string), the ``--stage_beam_args=STAGE:--flag=value`` strings,
        a list of both (the file's first), or the held form.
      graph: the run's stages.

    Raises:
      PipelineError: a stage name that is none of the graph's, or a flag that is no
        ``--flag``.
    """
    every, names = _stage_names(graph)
    pairs: list[tuple[str, str]] = []

    def add(stage: Any, flags: Any, shown: str) -> None:
        name = names.get(str(stage).strip().lower())
        if name is None:
            raise PipelineError(
                f"stage_beam_args names stage {str(stage).strip()!r} ({shown}), which is not "
                f"one; use one of {', '.join(every)}."
            )
        for flag in [flags] if isinstance(flags, str) else list(flags or ()):
            if not str(flag).startswith("--"):
                raise PipelineError(
                    f"stage_beam_args gives {name} {str(flag)!r}, which is no Beam "
                    f"flag; write it as --flag=value, e.g. "
                    f"--stage_beam_args={name}:--num_workers=4."
                )
            pairs.append((name, str(flag)))

    items = value if isinstance(value, (list, tuple)) else [value]
    for item in items:
        if isinstance(item, dict):
            for stage, flags in item.items():
                add(stage, flags, f"{stage}: {flags}")
        elif isinstance(item, (list, tuple)) and len(item) == 2:
            add(item[0], item[1], f"{item[0]}: {item[1]}")
        elif item is not None:
            stage, sep, flag = str(item).partition(":")
            if not sep:
                raise PipelineError(
                    f"--stage_beam_args={item} is not STAGE:--flag=value; pass e.g. "
                    "--stage_beam_args=Trainer:--machine_type=a2-highgpu-1g."
                )
            add(stage, flag, f"--stage_beam_args={item}")
    grouped: dict[str, list[str]] = {}
    for stage, flag in sorted(pairs, key=lambda p: every.index(p[0])):
        grouped.setdefault(stage, []).append(flag)
    return tuple((stage, tuple(flags)) for stage, flags in grouped.items())


def _convert(flag: str, value: Any, table: Table, graph: Sequence[Any]) -> Any:
    """A flag's (or YAML key's) value as its config field's type, checked."""
    if isinstance(value, os.PathLike):  # a pathlib.Path from Python: its text
        value = os.fspath(value)
    if flag == "no_cache":
        return _no_cache(value, graph)
    if flag == "stage_beam_args":
        return stage_beam_args(value, graph)
    s = table[flag][2]
    if s.parse is not None:
        return s.parse(value)
    if s.kind in _TYPES and isinstance(value, str):  # a flag's text given from Python
        try:
            return _TYPES[s.kind](value)
        except ValueError:
            raise PipelineError(
                f"--{flag}={value!r} is not a {'whole ' if s.kind == 'int' else ''}number; "
                f"pass e.g. --{flag}={field_default(table[flag][3], table[flag][1]) or 1}."
            ) from None
    if s.kind == "list":
        return tuple(value) if isinstance(value, (list, tuple)) else tuple(str(value).split(","))
    return value


def _absolute_graph(spec: str) -> str:
    """``--graph`` with its file's path made absolute (the run may change directory)."""
    where, sep, name = spec.rpartition(":")
    return f"{os.path.abspath(where)}:{name}" if sep and where.endswith(".py") else spec


def _check_bundled_module(module_file: Any) -> None:
    """Without --data and --config the bundled penguin data is read: only the bundled
    module file (or none) fits it; another module would silently run on penguins."""
    if module_file is None:
        return
    bundled = os.path.join(os.path.dirname(BUNDLED_CONFIG), "penguin_module.py")
    if os.path.abspath(str(module_file)) != os.path.abspath(bundled):
        raise PipelineError(
            f"--module_file {module_file} is given without --data (or --config), which would "
            "run it on the bundled penguin example's data; pass --data=YOUR_DATA (a CSV or "
            "TFRecord file, folder or glob) with it."
        )


def parse_config(argv: Sequence[str]) -> PipelineConfig:
    """Flags (+ optional YAML) -> PipelineConfig; leftover flags become ``beam_args``.

    Raises:
      PipelineError: an unknown setting in the config file or a malformed value. Unknown
        command-line flags are checked against Beam's options by ``parse_beam_args``.
    """
    spec = _graph_of(argv)
    graph = load_graph(spec) if spec else STAGE_GRAPH
    args, rest = build_parser(graph).parse_known_args(list(argv))
    table = _TABLE
    given = {k: v for k, v in vars(args).items() if k not in _OUTPUT_FLAGS}
    given.pop("graph", None)
    settings: dict[str, Any] = {}
    config_path = given.pop("config", None)
    if config_path is None and "data" not in given:
        if "input_splits" not in given:
            _check_bundled_module(given.get("module_file"))
        config_path = BUNDLED_CONFIG
    beam_args: list[str] = []
    origins: dict[str, str] = {}
    if config_path:
        loaded = _load_yaml(config_path, table)
        beam_args = [str(a) for a in loaded.pop("beam_args", [])]
        settings.update(loaded)
        origins = {key: f"--config {config_path}" for key in loaded}
    if "stage_beam_args" in settings and "stage_beam_args" in given:
        # The command line's add to the config file's (after them: a flag given in both
        # wins from the command line), as the Beam flags do.
        given["stage_beam_args"] = [settings["stage_beam_args"], *given["stage_beam_args"]]
    settings.update(given)
    origins.update({key: "the command line" for key in given})
    extra = [a for a in rest if a != "--"]
    return build_config(
        settings,
        graph,
        table,
        beam_args=tuple(beam_args + extra),
        graph_spec=_absolute_graph(spec),
        origins=origins,
    )


def build_config(
    settings: dict[str, Any],
    graph: Sequence[Any],
    table: Table,
    *,
    beam_args: Sequence[str] = (),
    graph_spec: str = "",
    origins: Optional[Mapping[str, str]] = None,
) -> PipelineConfig:
    """The config of ``settings`` (flag names -> values, each known to ``table``): each
    type-checked and converted as its setting says, gathered into the run's settings and
    the stages' sections (the command line's, ``--config``'s and the Python API's one way
    to a config).

    Args:
      origins: where each setting was given, for the error (``--config FILE``); default
        ``make_config``.

    Raises:
      PipelineError: one sentence naming every setting of the wrong type and the type it
        takes, then a value its setting refuses.
    """
    origins = origins or {}
    wrong: list[tuple[str, str]] = []
    for key, value in settings.items():
        section, field, s, cls = table[key]
        origin = origins.get(key, "make_config")
        fragment = expected_type(s, value, _is_optional(cls, field), origin.startswith("--config"))
        if fragment:
            shown = f"{key}: {value!r}" if origin.startswith("--config") else f"{key}={value!r}"
            wrong.append((origin, f"{shown} ({fragment})"))
    if isinstance(beam_args, (str, bytes)) or not all(isinstance(a, str) for a in beam_args):
        shown = f"beam_args={beam_args!r} ({type_name(beam_args)}; it takes a list of flags, "
        wrong.append(("make_config", shown + "e.g. ['--runner=DirectRunner'])"))
    if wrong:
        places = list(dict.fromkeys(origin for origin, _ in wrong))
        items = ", ".join(
            text if len(places) == 1 else f"{text} in {origin}" for origin, text in wrong
        )
        where = places[0] if len(places) == 1 else "The settings"
        raise PipelineError(f"{where} gives {items}; pass each as the type it takes.")
    sections: dict[str, dict[str, Any]] = {}
    for key, value in settings.items():
        section, field, _, _ = table[key]
        sections.setdefault(section, {})[field] = _convert(key, value, table, graph)
    classes = {s.config_key: s.Config for s in graph if s.Config is not None}
    return PipelineConfig(
        beam_args=tuple(beam_args),
        graph=graph_spec,
        **sections.get("", {}),
        **{k: classes[k](**v) for k, v in sections.items() if k},
    )


def _is_optional(cls: type, field: str) -> bool:
    """Whether the config field may be None (declared ``Optional[...]``)."""
    import dataclasses

    f = next(f for f in dataclasses.fields(cls) if f.name == field)
    return "Optional[" in str(f.type) or "None" in str(f.type)
