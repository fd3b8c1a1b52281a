"""A ``--metadata_url``'s credentials never printed, and its driver options' errors one
sentence, through the CLI as users hit them (no database server needed: each case fails
before or at connecting; tests/test_metadata_server.py checks whole runs on servers)."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest
from conftest import PENGUIN_DIR, forked_cli, free_port

SECRET = "s3cr3t-Value"


def _cli(*args: str, cwd) -> subprocess.CompletedProcess:
    """``python -m beam_pipeline ARGS`` in ``cwd``, in a process of its own (forked with the
    ML stack imported: what is tested is what the CLI prints, not its start)."""
    return forked_cli(args, cwd=str(cwd), timeout=300)


def _one_sentence(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr[-3000:]
    assert SECRET not in done.stderr
    return lines[0]


def test_a_run_on_an_unreachable_server_names_it_without_the_query_password(tmp_path):
    # The case: the password in the query string (pg8000 takes it there) was
    # printed in the "cannot be reached" error.
    port = free_port()
    url = f"postgresql+pg8000://beam@127.0.0.1:{port}/metadata?password={SECRET}"
    error = _one_sentence(
        _cli(
            "--no_tuner",
            f"--pipeline_root={tmp_path / 'root'}",
            f"--metadata_url={url}",
            cwd=tmp_path,
        )
    )
    assert error.startswith(
        f"error: Metadata store postgresql+pg8000://beam@127.0.0.1:{port}/metadata?password=*** "
        "cannot be reached ("
    ), error
    assert error.endswith("; pass a reachable SQLAlchemy URL with --metadata_url."), error


def _sqlite(tmp_path, *parts: str) -> str:
    return f"sqlite:///{tmp_path.joinpath(*parts)}?password={SECRET}"


@pytest.mark.parametrize(
    "url, message",
    [
        # A SQLite file whose folder is missing (SQLite ignores the parameter).
        (
            lambda t: _sqlite(t, "missing", "metadata.sqlite"),
            r"error: Metadata store sqlite:///.*/missing/metadata\.sqlite\?password=\*\*\*: "
            r"cannot open or write the SQLite file .*make sure its folder .*missing exists",
        ),
        # User-info and secret-named parameters of any case: masked; a parameter the driver
        # does not take: named, with where TLS settings go (was a TypeError traceback).
        (
            lambda t: (
                f"postgresql+pg8000://beam:{SECRET}@127.0.0.1:{free_port()}/m?"
                f"API_Key={SECRET}&access_token={SECRET}"
            ),
            r"error: --metadata_url postgresql\+pg8000://beam:\*\*\*@127\.0\.0\.1:\d+/m\?"
            r"API_Key=\*\*\*&access_token=\*\*\*: the pg8000 driver takes no option 'API_Key'; "
            r"remove \?API_Key= from the URL \(for TLS: \?sslmode=require",
        ),
        # libpq's sslmode on pg8000: one it cannot do, in one sentence (require and the
        # verify modes are translated: tests/test_metadata_server.py).
        (
            lambda t: f"postgresql://beam@127.0.0.1:{free_port()}/m?sslmode=prefer&pwd={SECRET}",
            r"error: --metadata_url postgresql\+pg8000://beam@127\.0\.0\.1:\d+/m\?pwd=\*\*\*: "
            r"sslmode=prefer is not supported by the pg8000 driver .*use sslmode=disable, "
            r"require, verify-ca or verify-full, or a postgresql\+psycopg2:// URL after pip "
            r"install psycopg2-binary\.$",
        ),
        (
            lambda t: f"mysql://beam:{SECRET}@127.0.0.1:{free_port()}/m?ssl_mode=REQUIRED",
            r"error: --metadata_url mysql\+pymysql://beam:\*\*\*@127\.0\.0\.1:\d+/m\?"
            r"ssl_mode=REQUIRED: the pymysql driver takes no option 'ssl_mode'; remove "
            r"\?ssl_mode= from the URL \(for TLS: \?ssl_ca=FILE",
        ),
        # A driver that is not installed: the ones that are, named.
        (
            lambda t: f"postgresql+psycopg2://beam:{SECRET}@127.0.0.1/m",
            r"error: --metadata_url postgresql\+psycopg2://beam:\*\*\*@127\.0\.0\.1/m needs a "
            r"database driver that is not installed \(psycopg2\); pip install it, or use a "
            r"driver installed with beam-pipeline: postgresql\+pg8000://",
        ),
    ],
    ids=[
        "sqlite-missing-folder",
        "unknown-option",
        "sslmode-prefer",
        "mysql-ssl-mode",
        "no-driver",
    ],
)
def test_a_bad_store_url_in_runs_commands_is_one_sentence_without_credentials(
    tmp_path, url, message
):
    # `runs list` opens the store exactly as a run does (MetadataStore.open), without a
    # run's imports.
    error = _one_sentence(_cli("runs", "list", f"--metadata_url={url(tmp_path)}", cwd=tmp_path))
    assert re.match(message, error), error


def test_runs_show_of_an_unknown_run_names_the_store_without_its_password(tmp_path):
    url = _sqlite(tmp_path, "metadata.sqlite")
    assert _cli("runs", "list", f"--metadata_url={url}", cwd=tmp_path).returncode == 0
    error = _one_sentence(_cli("runs", "show", "nosuch", f"--metadata_url={url}", cwd=tmp_path))
    assert error.startswith(
        f"error: No run 'nosuch' is recorded in the metadata store sqlite:///{tmp_path}/"
        "metadata.sqlite?password=***; "
    ), error


@pytest.mark.parametrize(
    "text, masked",
    [
        ("postgresql://me:pw@db/m?password=pw&sslmode=require",
         "postgresql://me:***@db/m?password=***&sslmode=require"),
        ("mysql://u@h/d?PASSWD=a;Pwd=b&client_secret=c&apikey=d&x_token=e#f",
         "mysql://u@h/d?PASSWD=***;Pwd=***&client_secret=***&apikey=***&x_token=***#f"),
        # A sentence's punctuation after the URL stays; masking twice changes nothing.
        ("store sqlite:////r/m.sqlite?password=a:b: cannot open",
         "store sqlite:////r/m.sqlite?password=***: cannot open"),
        ("store sqlite:////r/m.sqlite?password=***: cannot open",
         "store sqlite:////r/m.sqlite?password=***: cannot open"),
        # Not credentials: a port, other parameters, text without a URL.
        ("http://host:8080/x@y?sslmode=require&user=me", "http://host:8080/x@y?sslmode=require&user=me"),
        ("password=visible in plain text", "password=visible in plain text"),
    ],
)  # fmt: skip
def test_mask_hides_every_credential_of_a_url_and_nothing_else(text, masked):
    from beam_pipeline.core.secrets import mask

    assert mask(text) == masked
    assert mask(masked) == masked


# The bundled module with a run_fn that records the custom_config it received (outside the
# pipeline root) and saves the smallest model that serves.
_RECORDING_RUN_FN = """

import json as _json

import tensorflow as _tf


def run_fn(fn_args):
    with open(fn_args.custom_config["seen"], "w") as f:
        _json.dump(fn_args.custom_config, f)
    module = _tf.Module()
    spec = [_tf.TensorSpec([None], _tf.string)]
    module.f = _tf.function(lambda x: {"y": x}, input_signature=spec)
    signatures = {"serving_default": module.f}
    _tf.saved_model.save(module, fn_args.serving_model_dir, signatures=signatures)
"""


def test_custom_config_secrets_are_masked_where_recorded_and_reach_the_module(tmp_path):
    """``--custom_config`` with secret-looking keys (at any depth): the module receives the
    real values; manifest.json, the store and every other file of the pipeline root hold
    them masked, the other keys as given."""
    from beam_pipeline import cli

    module = tmp_path / "module.py"
    with open(os.path.join(PENGUIN_DIR, "penguin_module.py")) as f:
        module.write_text(f.read() + _RECORDING_RUN_FN)
    seen = tmp_path / "seen.json"
    given = {"api_key": SECRET, "auth": {"Client_Secret": SECRET, "x_token": SECRET},
             "db": [{"password": SECRET}], "credentials_file": SECRET, "seen": str(seen),
             "epochs": 2}  # fmt: skip
    root = tmp_path / "root"
    args = [
        "--runner=DirectRunner",
        "--direct_running_mode=in_memory",
        f"--data={os.path.join(PENGUIN_DIR, 'penguins.csv')}",
        "--csv_null_values=,NA",
        f"--module_file={module}",
        f"--pipeline_root={root}",
        "--run_id=secret",
        "--no_tuner",
        "--no_evaluator",
        "--no_infra_validator",
        "--no_progress",
        f"--custom_config={json.dumps(given)}",
    ]
    assert cli.main(args) == 0
    assert json.loads(seen.read_text()) == given
    with open(root / "runs" / "secret" / "manifest.json") as f:
        recorded = json.loads(json.load(f)["identity"]["trainer"]["custom_config"])
    assert recorded == {
        "api_key": "***", "auth": {"Client_Secret": "***", "x_token": "***"},
        "db": [{"password": "***"}], "credentials_file": "***", "seen": str(seen), "epochs": 2,
    }  # fmt: skip
    holding = [
        os.path.join(folder, name)
        for folder, _, names in os.walk(root)
        for name in names
        if SECRET.encode() in open(os.path.join(folder, name), "rb").read()
    ]
    assert holding == []
