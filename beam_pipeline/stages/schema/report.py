"""The Schema stage's section of the run report: each feature's type, presence, shape
and domain, from the published ``schema/schema.pbtxt``."""

from __future__ import annotations

from beam_pipeline.core import fileio
from beam_pipeline.engine.artifacts import Schema
from beam_pipeline.engine.report_sections import ReportSection, ReportView, Table

__all__ = ["schema_section"]

_DOMAIN_VALUES_SHOWN = 12


def schema_section(view: ReportView) -> ReportSection:
    from google.protobuf import text_format
    from tensorflow_metadata.proto.v0 import schema_pb2

    section = ReportSection("schema", "Schema", artifacts=(Schema,), empty="No schema.")
    with section.reading("the schema"):
        if not fileio.exists(view.path(Schema, "schema.pbtxt")):
            section.missing.append(view.gone(Schema) or "schema: not published")
            return section
        schema = text_format.Parse(view.read_text(Schema, "schema.pbtxt"), schema_pb2.Schema())
        domains = {d.name: list(d.value) for d in schema.string_domain}
        rows = []
        for f in schema.feature:
            domain = list(f.string_domain.value) or domains.get(f.domain, [])
            presence = f.presence
            if presence.min_fraction >= 1.0:
                required = "required"
            elif presence.min_count >= 1:
                required = "in every split"
            else:
                required = "optional"
            shape = "x".join(str(d.size) for d in f.shape.dim) if f.HasField("shape") else "-"
            shown = ", ".join(domain[:_DOMAIN_VALUES_SHOWN])
            more = " ..." if len(domain) > _DOMAIN_VALUES_SHOWN else ""
            rows.append(
                [f.name, schema_pb2.FeatureType.Name(f.type), required, shape, shown + more]
            )
        if rows:
            section.parts.append(Table(["feature", "type", "presence", "shape", "domain"], rows))
    return section
