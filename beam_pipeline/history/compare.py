"""Two runs side by side: parameters, input fingerprints, schema, statistics drift, and
the sections the runs' stages recorded for it (a model's metrics, a search's best
hyperparameters: :attr:`beam_pipeline.engine.history_entry.HistoryEntry.compared`)
(``runs diff RUN_A RUN_B``).

The schema and statistics are read from the two runs' recorded artifacts of those types
(tfmd protos); an artifact that is gone from disk is reported as missing, not compared.

Example::

    with MetadataStore.open(url) as store:
        d = diff_runs(store, "first", "again")
        d["schema"]["added"], d["drift"]["train"]["body_mass_g"]["mean_change"]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from google.protobuf import json_format
from tensorflow_metadata.proto.v0 import schema_pb2

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import SCHEMA_FILE, Schema, Statistics
from beam_pipeline.history.views import compared, made_by, run_executions
from beam_pipeline.metadata import ArtifactRecord, ExecutionRecord, MetadataStore

__all__ = ["diff_runs", "flat", "schema_diff", "statistics_drift"]

_STATS_FILE = "FeatureStats.pb"
# What "type or presence changed" compares per feature (the rest of a Feature, such as
# its description or drift comparator, is left out of the diff).
_FEATURE_FIELDS = ("type", "presence", "value_count", "shape", "domain")


def flat(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested parameters as dotted keys, so that a diff names the one setting changed."""
    if isinstance(value, Mapping) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _side_by_side(a: Mapping[str, Any], b: Mapping[str, Any], changed_only: bool) -> dict:
    keys = sorted(set(a) | set(b))
    return {k: [a.get(k), b.get(k)] for k in keys if not changed_only or a.get(k) != b.get(k)}


def _latest(executions: list[ExecutionRecord]) -> dict[str, ExecutionRecord]:
    return {e.stage: e for e in executions}  # the latest execution of each stage wins


def _output(executions: Mapping[str, ExecutionRecord], type_name: str) -> Optional[ArtifactRecord]:
    for e in executions.values():
        if type_name in e.outputs:
            return e.outputs[type_name]
    return None


def _feature_facts(feature: schema_pb2.Feature) -> dict[str, Any]:
    facts = {}
    for name in _FEATURE_FIELDS:
        if name == "type":
            facts[name] = schema_pb2.FeatureType.Name(feature.type)
        elif name == "domain":
            which = feature.WhichOneof("domain_info")
            value = getattr(feature, which) if which else None
            if value is not None and not isinstance(value, str):  # str: a named domain
                value = json_format.MessageToDict(value)
            facts[name] = None if which is None else {which: value}
        elif feature.HasField(name):
            facts[name] = json_format.MessageToDict(getattr(feature, name))
        else:
            facts[name] = None
    return facts


def schema_diff(a: schema_pb2.Schema, b: schema_pb2.Schema) -> dict[str, Any]:
    """Features added in ``b``, removed from ``a``, and per common feature each of type,
    presence, value count, shape and domain that differs (``[a, b]``)."""
    fa = {f.name: _feature_facts(f) for f in a.feature}
    fb = {f.name: _feature_facts(f) for f in b.feature}
    changed = {}
    for name in sorted(set(fa) & set(fb)):
        fields = _side_by_side(fa[name], fb[name], changed_only=True)
        if fields:
            changed[name] = fields
    return {
        "added": sorted(set(fb) - set(fa)),
        "removed": sorted(set(fa) - set(fb)),
        "changed": changed,
    }


def _numeric(path: str) -> dict[str, tuple[float, float]]:
    stats = Statistics.read_file(path)
    out = {}
    for dataset in stats.datasets[:1]:
        for feature in dataset.features:
            if feature.WhichOneof("stats") == "num_stats":
                name = ".".join(feature.path.step) or feature.name
                out[name] = (feature.num_stats.mean, feature.num_stats.std_dev)
    return out


def statistics_drift(a_uri: str, b_uri: str) -> dict[str, dict[str, dict[str, float]]]:
    """Per split present in both statistics artifacts and numeric feature in both: the
    mean and standard deviation in each run and their change (b - a)."""
    drift: dict[str, dict[str, dict[str, float]]] = {}
    splits_a = {d.rstrip("/") for d in fileio.listdir(a_uri)}
    splits_b = {d.rstrip("/") for d in fileio.listdir(b_uri)}
    for split in sorted(splits_a & splits_b):
        pa, pb = (fileio.join(u, split, _STATS_FILE) for u in (a_uri, b_uri))
        if not (fileio.exists(pa) and fileio.exists(pb)):
            continue
        na, nb = _numeric(pa), _numeric(pb)
        drift[split] = {
            name: {
                "mean_a": na[name][0],
                "mean_b": nb[name][0],
                "mean_change": nb[name][0] - na[name][0],
                "std_a": na[name][1],
                "std_b": nb[name][1],
                "std_change": nb[name][1] - na[name][1],
            }
            for name in sorted(set(na) & set(nb))
        }
    return drift


def _on_disk(artifact: Optional[ArtifactRecord], inner: str = "") -> Optional[str]:
    if artifact is None:
        return None
    path = fileio.join(artifact.uri, inner) if inner else artifact.uri
    return path if fileio.exists(path) else None


# What a run is made from: its data's and module's digests, and the pipeline's own code
# (beam_pipeline.engine.fingerprint.pipeline_code; None for runs recorded before it was).
_RUN_INPUTS = ("data", "module", "code")


def diff_runs(store: MetadataStore, run_a: str, run_b: str) -> dict[str, Any]:
    """Runs ``run_a`` and ``run_b`` compared (see the module docstring); values ``[a, b]``.

    Raises:
      PipelineError: either run is not recorded.
    """
    ea, eb = run_executions(store, run_a), run_executions(store, run_b)
    la, lb = _latest(ea), _latest(eb)
    oa, ob = made_by(store, ea), made_by(store, eb)
    runs = {r.run_id: r for r in store.list_runs() if r.run_id in (run_a, run_b)}
    inputs = _side_by_side(
        {k: runs[run_a].properties.get(k) for k in _RUN_INPUTS},
        {k: runs[run_b].properties.get(k) for k in _RUN_INPUTS},
        changed_only=False,
    )
    stages = list(dict.fromkeys([*la, *lb]))  # in the order they ran
    for stage in stages:
        ka = la[stage].cache_key if stage in la else None
        kb = lb[stage].cache_key if stage in lb else None
        inputs[f"{stage} cache key"] = [ka, kb]
    parameters = {}
    for stage in stages:
        pa = flat(dict(la[stage].parameters)) if stage in la else {}
        pb = flat(dict(lb[stage].parameters)) if stage in lb else {}
        changed = _side_by_side(pa, pb, changed_only=True)
        if changed:
            parameters[stage] = changed
    schemas = [_on_disk(_output(x, Schema.__name__), SCHEMA_FILE) for x in (la, lb)]
    schema: Optional[dict[str, Any]] = None
    if all(schemas):
        schema = schema_diff(Schema.read_file(schemas[0]), Schema.read_file(schemas[1]))
    stats = [_on_disk(_output(x, Statistics.__name__)) for x in (la, lb)]
    drift = statistics_drift(stats[0], stats[1]) if all(stats) else None
    d = {
        "runs": [run_a, run_b],
        "inputs": inputs,
        "parameters": parameters,
        "schema": schema,
        "drift": drift,
    }
    # What the stages recorded to compare, section by section (in the order they ran);
    # each section also a key of the diff where the diff has none of that name.
    ca, cb = compared(ea, oa), compared(eb, ob)
    d["compared"] = {
        name: _side_by_side(ca.get(name) or {}, cb.get(name) or {}, changed_only=False)
        for name in dict.fromkeys([*ca, *cb])
    }
    for name, section in d["compared"].items():
        d.setdefault(name, section)
    d["identical"] = _identical(d)
    return d


def _identical(d: Mapping[str, Any]) -> bool:
    """Whether the diff found no difference: same inputs and cache keys, parameters,
    schema, statistics (where both are on disk) and recorded sections."""
    same = all(a == b for a, b in d["inputs"].values())
    same = same and not d["parameters"]
    schema = d["schema"]
    if schema is not None:
        same = same and not (schema["added"] or schema["removed"] or schema["changed"])
    if d["drift"] is not None:
        same = same and all(
            v["mean_change"] == 0 and v["std_change"] == 0
            for features in d["drift"].values()
            for v in features.values()
        )
    return same and all(a == b for section in d["compared"].values() for a, b in section.values())
