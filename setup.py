"""beam-pipeline: a TFX-style ML pipeline run as Apache Beam work.

`pip install .` installs the three packages and the `beam-pipeline` command; the same file
serves Beam's `--setup_file` to ship the code to Dataflow and portable-runner workers.
Exact versions for a reproducible environment are in requirements.lock.
"""

import setuptools

REQUIRED = [
    "apache-beam[gcp]==2.77.0",
    "tensorflow==2.21.0",
    "tensorflow-transform==1.21.0",
    "tfx-bsl==1.21.0",
    "tensorflow-metadata==1.21.0",
    "keras==3.15.1",
    # [bayesian]: scipy and scikit-learn for keras-tuner's BayesianOptimization oracle.
    "keras-tuner[bayesian]==1.4.8",
    # keras-tuner imports tensorboard at run time without declaring it.
    "tensorboard==2.21.0",
    # The run report reads TensorBoard event files (TFRecords) without TensorFlow.
    "google-crc32c==1.9.0",
    # The gzip of the TFRecords the data stages write: ISA-L's deflate (transforms/tfrecords.py).
    "isal==1.9.1",
    "pyarrow",
    "pyyaml",
    # The metadata store (beam_pipeline/metadata): SQL through SQLAlchemy, its schema's
    # migrations through Alembic.
    "SQLAlchemy==2.0.58",
    "alembic==1.20.1",
    # The metadata store's server drivers, pure Python: postgresql:// (and
    # postgresql+pg8000://) URLs use pg8000, mysql:// and mariadb:// URLs PyMySQL
    # (beam_pipeline/metadata/connection.py: DEFAULT_DRIVERS).
    "pg8000==1.31.6",
    "PyMySQL==1.2.4",
    # The run report (report.html) is rendered from a Jinja template; the live progress
    # display is rich's.
    "jinja2==3.1.6",
    "rich==15.0.0",
    # The Evaluator (TFMA, which needs pandas<3) and the InfraValidator's TF Serving
    # request protos (PredictRequest, PredictionLog: the warm-up file's format).
    "tensorflow-model-analysis==0.52.0",
    "tensorflow-serving-api==2.19.1",
]

setuptools.setup(
    name="beam-pipeline",
    version="0.1.0",
    description="TFX-style ML pipelines (data stages, tuning, training) on Apache Beam",
    python_requires=">=3.10,<3.13",
    packages=setuptools.find_packages(include=["beam_pipeline*", "transforms*", "trainer*"]),
    package_data={
        "beam_pipeline": [
            "examples/*/*.csv",
            "examples/*/*.yaml",
            "examples/*/*.py",
            # The metadata store's Alembic migrations (a folder of scripts, not a package).
            "metadata/migrations/*.py",
            "metadata/migrations/*.mako",
            "metadata/migrations/versions/*.py",
            # The run report's template.
            "report/templates/*.html",
            # The stages' own templates of their report sections.
            "stages/*/*.html",
        ]
    },
    include_package_data=True,
    install_requires=REQUIRED,
    entry_points={"console_scripts": ["beam-pipeline=beam_pipeline.cli:console_main"]},
)
