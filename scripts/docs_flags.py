"""The flag reference of the docs site, generated from the command line's own parser.

An mkdocs hook (``hooks:`` in mkdocs.yml): when the site is built, the marker
``<!-- flags: generated -->`` in ``docs/flags.md`` is replaced by one table per flag group
of :func:`beam_pipeline.flags.build_parser`, with each flag's default read from the
config dataclasses the flags fill (``beam_pipeline.config``, ``beam_pipeline.console``)
and its meaning from the flag's ``help`` or, where it has none, from the ``Attributes:``
entry of its config field's docstring. So the page cannot drift from the code: a flag
added to the parser appears on the next build, and one with neither text fails the build.

Run by hand, it prints the tables::

    .venv/bin/python scripts/docs_flags.py
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import inspect
import re
from typing import Any

MARKER = "<!-- flags: generated -->"
PAGE = "flags.md"
# The home page's table of the bundled graph's stages, from their declarations.
STAGES_MARKER = "<!-- stages: generated -->"
STAGES_PAGE = "index.md"

# Flags that the parser documents but that fill no config field (read before the rest).
_NO_FIELD = {"config": "none", "version": "none", "graph": "none"}


def _attribute_docs(cls: type) -> dict[str, str]:
    """``field -> text`` from a class docstring's ``Attributes:`` section (Google style).

    An entry ``a / b: text`` documents both fields.
    """
    doc = inspect.getdoc(cls) or ""
    if "Attributes:" not in doc:
        return {}
    section = doc.split("Attributes:", 1)[1]
    entries: dict[str, str] = {}
    names: list[str] = []
    for line in section.splitlines():
        m = re.match(r"^  (\w+(?: / \w+)*): (.*)$", line)
        if m:
            names = m.group(1).split(" / ")
            for name in names:
                entries[name] = m.group(2).strip()
        elif line.startswith("    ") and names:
            for name in names:
                entries[name] += " " + line.strip()
        elif line.strip() and not line.startswith(" "):
            break  # the next section
    return entries


def _format_default(value: Any) -> str:
    if value is None or value == "" or value == ():
        return ""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, enum.Enum):
        return f"`{value.value}`"
    if isinstance(value, tuple):
        parts = []
        for item in value:
            if isinstance(item, tuple):
                parts.append("=".join(str(getattr(v, "value", v)) for v in item))
            elif item == "":
                parts.append("(empty field)")
            else:
                parts.append(str(getattr(item, "value", item)))
        return "`" + ",".join(parts) + "`"
    return f"`{value}`"


def _field_facts() -> dict[str, tuple[Any, str]]:
    """``dest -> (default, docstring text)`` for every flag that fills a config field."""
    from beam_pipeline import flags
    from beam_pipeline.config import PipelineConfig
    from beam_pipeline.console import OutputConfig

    config = PipelineConfig()
    facts: dict[str, tuple[Any, str]] = {}
    for dest, (section, field, setting, _) in flags.flag_table().items():
        holder = getattr(config, section) if section else config
        facts[dest] = (getattr(holder, field), setting.help)
    output = OutputConfig()
    for f in dataclasses.fields(output):
        facts[f.name] = (getattr(output, f.name), _attribute_docs(OutputConfig).get(f.name, ""))
    return facts


def _row(action: argparse.Action, facts: dict[str, tuple[Any, str]]) -> str:
    names = " / ".join(f"`{o}`" for o in action.option_strings)
    if action.dest in _NO_FIELD:
        default, doc = None, ""
    elif action.dest in facts:
        default, doc = facts[action.dest]
    else:
        raise ValueError(
            f"Flag {action.option_strings[0]} fills no field of the config "
            "(a setting of a stage's Config or of PipelineConfig); declare it there or add it "
            "to scripts/docs_flags.py's _NO_FIELD."
        )
    if isinstance(action, argparse._StoreFalseAction):
        shown = "off" if default is False else ""  # --no_X: the stage runs unless given
    elif isinstance(action, argparse._StoreTrueAction):
        shown = ""
    else:
        shown = _format_default(default)
    text = action.help or doc
    if isinstance(action, argparse._StoreFalseAction) and not action.help and text:
        text = f"Turns off `{_field_name(action.dest)}` (on by default): {text}"
    if not text:
        raise ValueError(
            f"Flag {action.option_strings[0]} has no help text and its config field no "
            "Attributes: entry; document one of them for the flag reference."
        )
    if action.choices:
        text += " One of " + ", ".join(f"`{c}`" for c in action.choices) + "."
    if action.nargs == "?" and action.const is not None:
        text += f" Without a value: `{action.const}`."
    return f"| {names} | {shown} | {_markdown(text)} |"


def _field_name(dest: str) -> str:
    from beam_pipeline import flags

    section, field = flags._FIELDS[dest]
    return f"{section}.{field}" if section else field


def _markdown(text: str) -> str:
    """One table cell: reST's ``code`` as markdown's, ``<`` outside code escaped."""
    parts = text.replace("``", "`").replace("|", "\\|").replace("\n", " ").split("`")
    for i in range(0, len(parts), 2):  # outside code spans
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;")
    return "`".join(parts)


def flag_tables() -> str:
    """The markdown tables of every flag, one per parser group, in the parser's order."""
    from beam_pipeline.flags import build_parser

    parser = build_parser()
    facts = _field_facts()
    out = []
    for group in parser._action_groups:  # argparse keeps its groups only here
        actions = [a for a in group._group_actions if not isinstance(a, argparse._HelpAction)]
        if not actions:
            continue
        title = "general" if group.title in ("options", "optional arguments") else group.title
        out += [
            f"### {title if title != title.lower() else title.capitalize()}",
            "",
            "| flag | default | meaning |",
            "|---|---|---|",
        ]
        out += [_row(a, facts) for a in actions]
        out.append("")
    return "\n".join(out)


def stage_table() -> str:
    """The markdown table of ``STAGE_GRAPH``'s stages, in graph order: each one's name,
    ``description``, the artifacts it reads (optional ones in brackets) and writes, and
    its switch; a stage added to the graph is on the home page on the next build."""
    from beam_pipeline.stages.graph import STAGE_GRAPH

    out = ["| stage | what; where it runs | reads | writes | off with |", "|---|---|---|---|---|"]
    for stage in STAGE_GRAPH:
        reads = ", ".join(
            f"[{i.type.__name__}]" if i.optional else i.type.__name__ for i in stage.inputs
        )
        writes = ", ".join(t.__name__ for t in stage.outputs)
        flag = stage.switch_flag()
        out.append(
            f"| {stage.name} | {stage.description} | {reads or '`--data`'} | {writes} | "
            f"{f'`--no_{flag}`' if flag else ''} |"
        )
    return "\n".join(out)


def on_page_markdown(markdown: str, page, config, files) -> str:
    """mkdocs hook: fills the flag reference page's marker, and the home page's stages."""
    if page.file.src_uri == STAGES_PAGE:
        if STAGES_MARKER not in markdown:
            raise ValueError(f"docs/{STAGES_PAGE} lost its marker {STAGES_MARKER!r}")
        return markdown.replace(STAGES_MARKER, stage_table())
    if page.file.src_uri != PAGE:
        return markdown
    if MARKER not in markdown:
        raise ValueError(f"docs/{PAGE} lost its marker {MARKER!r}")
    return markdown.replace(MARKER, flag_tables())


if __name__ == "__main__":
    print(flag_tables())
