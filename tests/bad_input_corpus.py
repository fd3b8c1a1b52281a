"""The bad-input corpus: every case of docs/bad-input.md that the suite can run cheaply, as a
table of rows (input files, command, expected ending), run by ONE parametrized test
(tests/test_bad_input.py) and tied to the docs table by tests/test_docs.py.

A row is a :class:`Case`. Its files are written into a fresh folder, ``{d}`` in the
command and in the phrase stands for that folder, and the CLI runs in the test process
(``beam_pipeline.cli.main``) with ``--pipeline_root`` in a folder of its own. The test
checks the exit code, that stderr is exactly one ``error:`` sentence matching ``phrase``
(a regular expression, searched), and what the pipeline root holds afterwards
(:class:`Left`).

docs/bad-input.md names each row in its "tested by" column as
``tests/test_bad_input.py::test_bad_input[<id>]`` (the pytest node id), on the line of
the case whose "how it ends" cell starts with ``exit <code>``; tests/test_docs.py fails
when a row is missing from the docs, named twice, disagrees on the exit code, or when the
docs name a row that is not here. How to add a row: docs/development.md.

Keep rows cheap: a row should stop before any Beam job (a header, a flag, a module file
that does not load). A row whose case is not fixed yet carries ``pending`` (the issue item
that fixes it): it runs as a strict xfail checking the exit code, one sentence, its phrase
where it has one and what is left, so the fix turns it into a failure (XPASS) until
``pending`` is removed, its ``phrase`` written and its docs line added.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import re
from collections.abc import Mapping

# The smallest CSV the runs accept (a header and a row).
CSV = "a,b\n1,2\n"
# A module file the loader accepts (the cases below break one thing each).
PREPROCESSING_FN = "def preprocessing_fn(inputs):\n    return dict(inputs)\n"


class Left(enum.Enum):
    """What a case leaves under ``--pipeline_root``."""

    # The root is not even created: refused before anything is written.
    NOTHING = "nothing"
    # The failed run's record only: ``runs/<id>/`` holds summary.json (its last stage
    # ``failed``, the sentence as its note), manifest.json, run.log and report.html, beside
    # the store; no artifact, no ``.staging``, no cache.
    RECORD = "the run's record"


@dataclasses.dataclass(frozen=True)
class Case:
    """One row: the files to write, the command, and how it must end."""

    id: str
    # Relative path -> text or bytes, written under the case's folder ``{d}``.
    files: Mapping[str, str | bytes]
    # The CLI's arguments; ``{d}`` is the case's folder. The test adds --pipeline_root
    # (and --no_progress to a run, not to a ``runs`` command).
    args: tuple[str, ...]
    exit: int
    # A regular expression searched in the one sentence (after "error: "); ``{d}`` is the
    # case's folder (escaped).
    phrase: str
    left: Left = Left.NOTHING
    # The issue item that will make this row pass; the row is a strict xfail until then.
    pending: str = ""
    # Environment variables set for the run (e.g. the terminal's COLUMNS).
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def argv(self, folder: str) -> list[str]:
        return [a.replace("{d}", folder) for a in self.args]

    def pattern(self, folder: str) -> re.Pattern:
        return re.compile(self.phrase.replace("{d}", re.escape(folder)))


def _data(*extra: str) -> tuple[str, ...]:
    return ("--data={d}/data.csv", *extra)


def _module(source: str, *extra: str) -> dict:
    """The files and args of a run of the smallest CSV with the module file ``source``."""
    files = {"data.csv": CSV, "m.py": source}
    return dict(files=files, args=_data("--module_file={d}/m.py", *extra))


# Spans 1, 2 and 3 of --data={d}/span-{SPAN}/d.csv.
_SPANS = {f"span-{n}/d.csv": f"a,b\n{n},1\n" for n in (1, 2, 3)}

CASES: tuple[Case, ...] = (
    # --data and its files (ExampleGen's checks before any job).
    Case(
        "data-glob-matches-no-file",
        {},
        ("--data={d}/nope*.csv",),
        2,
        r"--data '{d}/nope\*\.csv' matches no file; pass an existing CSV/TFRecord file",
    ),
    Case(
        "data-scheme-without-file-system",
        {},
        ("--data=foo://bucket/x.csv",),
        2,
        r"--data 'foo://bucket/x\.csv' cannot be listed \(Unable to get filesystem from "
        r"specified path.*\); pass an existing file, folder or glob\.$",
    ),
    Case(
        "data-file-missing",
        {},
        ("--data={d}/missing.csv",),
        2,
        r"--data '{d}/missing\.csv' matches no file",
    ),
    Case(
        "empty-file",
        {"data.csv": ""},
        _data(),
        2,
        r"Input file {d}/data\.csv is empty; remove it from --data or give it a header",
    ),
    Case(
        "header-is-data",
        {"data.csv": "1,2,3\n4,5,6\n"},
        _data(),
        2,
        r"{d}/data\.csv:1 starts with data \['1', '2', '3'\], not a header; add a first line",
    ),
    Case(
        "header-empty-name",
        {"data.csv": "a,,c\n1,2,3\n"},
        _data(),
        2,
        r"{d}/data\.csv:1 has an empty column name \(column 2\); name every column",
    ),
    Case(
        "header-name-twice",
        {"data.csv": "a,b,a\n1,2,3\n"},
        _data(),
        2,
        r"{d}/data\.csv:1 names column 'a' twice; give columns unique names",
    ),
    Case(
        "header-unclosed-quote",
        {"data.csv": 'a,"b\n1,2\n'},
        _data(),
        2,
        r"{d}/data\.csv:1 has no readable header row .*; fix the quoting of its first line",
    ),
    Case(
        "headers-differ",
        {"a.csv": "x,y\n1,2\n", "b.csv": "x,z\n1,2\n"},
        ("--data={d}/*.csv",),
        2,
        r"{d}/b\.csv has header \['x', 'z'\] but {d}/a\.csv has \['x', 'y'\]; give all",
    ),
    Case(
        "header-not-utf8",
        {"data.csv": b"name,city\nM\xfcller,K\xf6ln\n"},
        _data(),
        2,
        r"{d}/data\.csv is not UTF-8 text \(.*\); re-encode it as UTF-8\.$",
    ),
    Case(
        "gz-not-gzip",
        {"data.csv.gz": b"\x1f\x8b\x08\x00 not really gzip"},
        ("--data={d}/data.csv.gz",),
        2,
        r"{d}/data\.csv\.gz cannot be decompressed as its name says \(.*\); check the file",
    ),
    Case(
        "format-unknown",
        {"data.parquet": "x"},
        ("--data={d}/data.parquet",),
        2,
        r"{d}/data\.parquet is neither \.csv nor \.tfrecord by name; rename it or pass "
        r"--data_format=csv",
    ),
    Case(
        "data-folder-holds-a-readme",
        {"data/a.csv": CSV, "data/README": "about the data\n"},
        ("--data={d}/data",),
        2,
        r"--data folder {d}/data holds README, which is not data .*: --data '{d}/data/\*\.csv'",
    ),
    Case(
        "partition-feature-not-a-column",
        {"data.csv": CSV},
        _data("--partition_feature=x"),
        2,
        r"--partition_feature 'x' is not a column of {d}/data\.csv \(columns: a, b\); pass one",
        Left.RECORD,
    ),
    Case(
        "module-file-without-data",
        {"m.py": PREPROCESSING_FN},
        ("--module_file={d}/m.py",),
        2,
        r"--module_file {d}/m\.py is given without --data .*; pass --data=YOUR_DATA",
    ),
    # Flags, read before anything is written.
    Case(
        "unknown-flag",
        {"data.csv": CSV},
        _data("--bogus_flag=1"),
        2,
        r"Unknown flag '--bogus_flag=1' on the command line: it is neither",
    ),
    Case(
        "misspelled-flag",
        {"data.csv": CSV},
        _data("--modul_file=m.py"),
        2,
        r"Unknown flag '--modul_file=m\.py' .*; did you mean --module_file\?",
    ),
    Case(
        "misspelled-runner",
        {"data.csv": CSV},
        _data("--runner=DirectRuner"),
        2,
        r"--runner=DirectRuner is not a runner Beam knows; did you mean --runner=DirectRunner\?",
    ),
    Case(
        "split-buckets-not-pairs",
        {"data.csv": CSV},
        _data("--split_buckets=train"),
        2,
        r"--split_buckets 'train' must look like train=\.\.\.,eval=\.\.\.; fix its format",
    ),
    Case(
        "split-buckets-zero",
        {"data.csv": CSV},
        _data("--split_buckets=train=0,eval=1"),
        2,
        r"--split_buckets gives train 0 buckets",
    ),
    Case(
        "max-rejected-fraction-nan",
        {"data.csv": CSV},
        _data("--max_rejected_fraction=nan"),
        2,
        r"--max_rejected_fraction=nan is out of range: pass a number from 0 to 1",
    ),
    Case(
        "run-id-not-a-folder-name",
        {"data.csv": CSV},
        _data("--run_id=../../x"),
        2,
        r"--run_id='\.\./\.\./x' is not a run name: use 1 to 128 letters",
    ),
    Case(
        "config-unknown-setting",
        {"data.csv": CSV, "c.yaml": "bogus: 1\n"},
        _data("--config={d}/c.yaml"),
        2,
        r"--config {d}/c\.yaml has setting 'bogus', which is neither a beam_pipeline setting",
    ),
    Case(
        "no-cache-unknown-stage",
        {"data.csv": CSV},
        _data("--no_cache=Pushr"),
        2,
        r"--no_cache names stage 'Pushr', which is not one; pass all or some of ExampleGen",
    ),
    Case(
        "custom-config-not-json",
        {"data.csv": CSV},
        _data("--custom_config={bad"),
        2,
        r"--custom_config is not valid JSON \(.*\); pass a JSON object",
    ),
    Case(
        "custom-config-a-list",
        {"data.csv": CSV},
        _data("--custom_config=[1]"),
        2,
        r"--custom_config is a JSON list, not an object; pass a JSON object",
    ),
    Case(
        "serving-endpoint-not-host-port",
        {"data.csv": CSV},
        _data("--serving_endpoint=localhost"),
        2,
        r"--serving_endpoint=localhost is not HOST:PORT; pass TF Serving's gRPC address",
    ),
    Case(
        "serving-endpoint-unreachable",
        {"data.csv": CSV},
        # Port 9 (discard): nothing listens there on a test machine.
        _data("--serving_endpoint=127.0.0.1:9"),
        2,
        r"--serving_endpoint 127\.0\.0\.1:9 cannot be reached \(the connection failed\); start",
    ),
    Case(
        "local-root-with-dataflow",
        {"data.csv": CSV},
        _data("--runner=DataflowRunner", "--project=p", "--region=r", "--temp_location=gs://b/t"),
        2,
        r"--pipeline_root .* is on this machine's disk, but --runner=DataflowRunner runs on "
        r"Google Cloud workers, which cannot read it; pass --pipeline_root=gs://",
    ),
    # The metadata store, opened before anything is written.
    Case(
        "metadata-file-not-sqlite",
        {"data.csv": CSV, "m.sqlite": "not a database"},
        _data("--metadata_url=sqlite:///{d}/m.sqlite"),
        2,
        r"Metadata store sqlite:///{d}/m\.sqlite: {d}/m\.sqlite is not a SQLite database or is "
        r"corrupt .*; move the file away",
    ),
    Case(
        "metadata-folder-missing",
        {"data.csv": CSV},
        _data("--metadata_url=sqlite:///{d}/missing/m.sqlite"),
        2,
        r"cannot open or write the SQLite file {d}/missing/m\.sqlite .*; make sure its folder",
    ),
    Case(
        "metadata-server-unreachable-password-masked",
        {"data.csv": CSV},
        _data("--metadata_url=postgresql+pg8000://u:s3cret@127.0.0.1:9/x?password=s3cret"),
        2,
        r"^(?!.*s3cret)Metadata store postgresql\+pg8000://u:\*\*\*@127\.0\.0\.1:9/x.* cannot be "
        r"reached .*; pass a reachable SQLAlchemy URL with --metadata_url\.$",
    ),
    # --schema.
    Case(
        "schema-missing",
        {"data.csv": CSV},
        _data("--schema={d}/nope.pbtxt"),
        2,
        r"Schema file {d}/nope\.pbtxt does not exist; pass the path of an existing schema",
    ),
    Case(
        "schema-not-a-schema",
        {"data.csv": CSV, "s.pbtxt": "not a schema {"},
        _data("--schema={d}/s.pbtxt"),
        2,
        r"Schema file {d}/s\.pbtxt is not a valid text-format tensorflow_metadata Schema \(1:1",
    ),
    # The module file, loaded before any job.
    Case(
        "module-syntax-error",
        **_module("def preprocessing_fn(inputs):\n    return (\n"),
        exit=2,
        phrase=r"Module file {d}/m\.py:2 has a syntax error \('\(' was never closed\); fix that",
    ),
    Case(
        "module-sys-exit-at-import",
        **_module("import sys\nsys.exit(3)\n"),
        exit=2,
        phrase=r"Module file {d}/m\.py:2 called sys\.exit\(3\) while being imported, which would "
        r"end the pipeline; remove that call",
    ),
    Case(
        "module-without-preprocessing-fn",
        **_module("x = 1\n"),
        exit=2,
        phrase=r"Module file {d}/m\.py defines no preprocessing_fn\(inputs\); add one",
    ),
    Case(
        "module-misspelled-run-fn",
        **_module(PREPROCESSING_FN + "def run_function(fn_args):\n    pass\n"),
        exit=2,
        phrase=r"{d}/m\.py defines run_function\(\) but no run_fn; did you mean run_fn\? .*"
        r"--trainer_entry_point=run_function",
    ),
    Case(
        "module-trainer-fn",
        **_module(PREPROCESSING_FN + "def trainer_fn(trainer_fn_args, schema):\n    pass\n"),
        exit=2,
        phrase=r"{d}/m\.py defines trainer_fn, which needs tf\.estimator, and tf\.estimator was "
        r"removed in TensorFlow 2\.16; rewrite it as run_fn\(fn_args\)",
    ),
    # Settings of the wrong type in --config: one check from their declarations.
    Case(
        "yaml-switch-quoted",
        {"data.csv": CSV, "c.yaml": 'ignore_anomalies: "false"\n'},
        _data("--config={d}/c.yaml"),
        2,
        r"^--config {d}/c\.yaml gives ignore_anomalies: 'false' \(text; it takes true or false, "
        r"unquoted\); pass each as the type it takes\.$",
    ),
    Case(
        "yaml-data-a-list",
        {"c.yaml": "data: [a, b]\n"},
        ("--config={d}/c.yaml",),
        2,
        r"^--config {d}/c\.yaml gives data: \['a', 'b'\] \(a list; it takes text\); pass each",
    ),
    Case(
        "yaml-data-a-number",
        {"c.yaml": "data: 123\n"},
        ("--config={d}/c.yaml",),
        2,
        r"gives data: 123 \(a number; it takes text, quoted\); pass each as the type it takes",
    ),
    Case(
        "yaml-switch-a-number",
        {"data.csv": CSV, "c.yaml": "tuner: 0\n"},
        _data("--config={d}/c.yaml"),
        2,
        r"^--config {d}/c\.yaml gives tuner: 0 \(a number; it takes true or false\); pass each",
    ),
    Case(
        "yaml-whole-number-a-fraction",
        {"data.csv": CSV, "c.yaml": "train_steps: 5.5\n"},
        _data("--config={d}/c.yaml"),
        2,
        r"gives train_steps: 5\.5 \(a number; it takes a whole number\); pass each as the type",
    ),
    Case(
        "yaml-data-empty",
        {"c.yaml": "data:\n"},
        ("--config={d}/c.yaml",),
        2,
        r"^--config {d}/c\.yaml gives data: None \(no value; it takes text\); pass each",
    ),
    Case(
        "yaml-number-a-boolean",
        {"data.csv": CSV, "c.yaml": "train_steps: true\n"},
        _data("--config={d}/c.yaml"),
        2,
        r"gives train_steps: True \(a boolean; it takes a whole number\)",
    ),
    Case(
        "yaml-list-of-non-text",
        {"data.csv": CSV, "c.yaml": "csv_null_values: [NA, 3]\n"},
        _data("--config={d}/c.yaml"),
        2,
        r"gives csv_null_values: \['NA', 3\] \(a list; it takes text or a list of text\)",
    ),
    Case(
        "yaml-choice-not-one",
        {"data.csv": CSV, "c.yaml": "warm_start: newest\n"},
        _data("--config={d}/c.yaml"),
        2,
        r"gives warm_start: 'newest' \(text; it takes one of latest_blessed, latest\)",
    ),
    Case(
        "yaml-beam-args-not-a-list",
        {"data.csv": CSV, "c.yaml": "beam_args: --runner=DirectRunner\n"},
        _data("--config={d}/c.yaml"),
        2,
        r"gives beam_args '--runner=DirectRunner', which is not a list of flags; write it as a "
        r"list, e\.g\. beam_args: \[--runner=DirectRunner\]",
    ),
    Case(
        "yaml-spans-read-as-sexagesimal",
        {"s1/data.csv": CSV, "c.yaml": "spans: 1:3\n"},
        ("--data={d}/s{SPAN}/data.csv", "--config={d}/c.yaml"),
        2,
        # YAML 1.1 reads 1:3 as 63: read as written, then refused for the spans there are.
        r"^--spans=1:3 reaches past the spans --data '{d}/s\{SPAN\}/data\.csv' has \(1\); "
        r"pass FIRST:LAST within them, e\.g\. --spans=1:1\.$",
    ),
    # Beam flags with a value their option does not take.
    Case(
        "stage-beam-args-not-a-number",
        {"data.csv": CSV},
        _data("--stage_beam_args", "ExampleGen:--direct_num_workers=abc"),
        2,
        r"^--stage_beam_args=ExampleGen\+Statistics:--direct_num_workers=abc is not a value "
        r"Beam's --direct_num_workers takes \(invalid int value: 'abc'\); pass one it takes\.$",
    ),
    Case(
        "beam-flag-not-a-number",
        {"data.csv": CSV},
        _data("--direct_num_workers=abc"),
        2,
        r"^--direct_num_workers=abc is not a value Beam's --direct_num_workers takes",
    ),
    Case(
        "stage-beam-args-not-a-choice",
        {"data.csv": CSV},
        _data("--stage_beam_args=Transform:--direct_running_mode=fast"),
        2,
        r"^--stage_beam_args=Transform:--direct_running_mode=fast is not a value Beam's "
        r"--direct_running_mode takes \(invalid choice: 'fast' \(choose from 'in_memory', "
        r"'multi_threading', 'multi_processing'\)\); pass one it takes\.$",
    ),
    # Spans (--data with {SPAN}): checked against the spans that exist, before any job.
    Case(
        "spans-range-past-the-spans",
        _SPANS,
        ("--data={d}/span-{SPAN}/d.csv", "--spans=0:2000000000"),
        2,
        r"^--spans=0:2000000000 reaches past the spans --data '{d}/span-\{SPAN\}/d\.csv' has "
        r"\(1, 2, 3\); pass FIRST:LAST within them, e\.g\. --spans=1:3\.$",
    ),
    Case(
        "span-window-past-the-spans",
        _SPANS,
        ("--data={d}/span-{SPAN}/d.csv", "--span_window=1000000000"),
        2,
        r"^--span_window 1000000000 asks for 1000000000 spans but --data '{d}/span-\{SPAN\}/"
        r"d\.csv' has 3; lower --span_window\.$",
    ),
    Case(
        "span-with-an-empty-file",
        {**_SPANS, "span-1/e.csv": ""},  # an old span, not in the window
        ("--data={d}/span-{SPAN}/*.csv",),
        2,
        r"^Input file {d}/span-1/e\.csv is empty; remove it from --data or give it a header",
    ),
    Case(
        "spans-and-span-window",
        _SPANS,
        ("--data={d}/span-{SPAN}/d.csv", "--spans=1:2", "--span_window=3"),
        2,
        r"^--spans=1:2 and --span_window=3 both choose the spans to read; pass one of them",
    ),
    Case(
        "span-in-input-splits",
        _SPANS,
        ("--input_splits=train={d}/span-{SPAN}/d.csv,eval={d}/span-1/d.csv",),
        2,
        r"^--input_splits train={d}/span-\{SPAN\}/d\.csv has \{SPAN\}, which only --data "
        r"reads; name each split's files without it",
    ),
)

# The docs table's link to a row: its pytest node id.
DOCS_LINK = re.compile(r"tests/test_bad_input\.py::test_bad_input\[([A-Za-z0-9_.-]+)\]")
DOCS_PAGE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "bad-input.md"
)


def docs_rows(path: str = DOCS_PAGE) -> list[tuple[str, str, str]]:
    """The (case, how it ends, tested by) cells of docs/bad-input.md's table."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if not line.startswith("| ") or line.startswith(("| case ", "|---")):
                continue
            # Cells are split on " | " (a "|" inside a cell would be written as \|).
            cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
            assert len(cells) == 3, f"docs/bad-input.md: a row without 3 cells: {line!r}"
            rows.append(tuple(cells))
    return rows
