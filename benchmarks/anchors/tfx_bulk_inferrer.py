#!/usr/bin/env python3
"""Anchor run: TFX 1.16's BulkInferrer (tfx-bsl RunInference) on LocalDagRunner.

Usage (in the venv that setup_tfx_anchor.sh makes):
  # once: CSV -> gzip tf.Example TFRecords, one split "train" holding every row
  python tfx_bulk_inferrer.py examples --data CSV_DIR --out DIR
  # each timed run: Importer(examples) + Importer(model) -> BulkInferrer
  python tfx_bulk_inferrer.py infer --examples EXAMPLES_URI --model MODEL_URI --out DIR \
      [--beam-mode in_memory|multi_processing] [--workers N]

EXAMPLES_URI is the Examples artifact folder (holding Split-train/); MODEL_URI a Model
artifact folder holding Format-Serving/ (the SavedModel, see taxi_infer_model.py). Without
--beam-mode the Beam arguments are LocalDagRunner's defaults (none: the DirectRunner's
defaults). Prints the BulkInferrer execution's wall time from its ML Metadata record, the
PredictionLogs it wrote and rows/s, and one JSON line (prefixed "RESULT ").
"""
import argparse
import glob
import json
import os
import time

p = argparse.ArgumentParser()
p.add_argument('mode', choices=['examples', 'infer'])
p.add_argument('--data')
p.add_argument('--examples')
p.add_argument('--model')
p.add_argument('--out', required=True)
p.add_argument('--beam-mode', choices=['in_memory', 'multi_processing'])
p.add_argument('--workers', type=int, default=0)
a = p.parse_args()

from tfx import v1 as tfx

os.makedirs(a.out, exist_ok=True)
if a.mode == 'examples':
    output = tfx.proto.Output(split_config=tfx.proto.SplitConfig(
        splits=[tfx.proto.SplitConfig.Split(name='train', hash_buckets=1)]))
    comps = [tfx.components.CsvExampleGen(input_base=a.data, output_config=output)]
    beam_args = ['--direct_running_mode=multi_processing', f'--direct_num_workers={a.workers}']
else:
    examples = tfx.dsl.Importer(source_uri=a.examples, artifact_type=tfx.types.standard_artifacts.Examples,
                                properties={'split_names': '["train"]'}).with_id('import_examples')
    model = tfx.dsl.Importer(source_uri=a.model, artifact_type=tfx.types.standard_artifacts.Model).with_id('import_model')
    inferrer = tfx.components.BulkInferrer(
        examples=examples.outputs['result'], model=model.outputs['result'],
        data_spec=tfx.proto.DataSpec(example_splits=['train']),
        model_spec=tfx.proto.ModelSpec(model_signature_name=['serving_default']))
    comps = [examples, model, inferrer]
    beam_args = []
    if a.beam_mode:
        beam_args = [f'--direct_running_mode={a.beam_mode}', f'--direct_num_workers={a.workers}']

db = os.path.join(a.out, 'mlmd.sqlite')
pipe = tfx.dsl.Pipeline(pipeline_name='anchor_bulk', pipeline_root=os.path.join(a.out, 'root'), components=comps,
                        enable_cache=False,
                        metadata_connection_config=tfx.orchestration.metadata.sqlite_metadata_connection_config(db),
                        beam_pipeline_args=beam_args)
t0 = time.time()
tfx.orchestration.LocalDagRunner().run(pipe)
total = time.time() - t0

from ml_metadata.metadata_store import metadata_store
from ml_metadata.proto import metadata_store_pb2
cfg = metadata_store_pb2.ConnectionConfig(); cfg.sqlite.filename_uri = db
store = metadata_store.MetadataStore(cfg)
times = {}
for e in store.get_executions():
    name = store.get_execution_types_by_id([e.type_id])[0].name.split('.')[-1]
    times[name] = (e.last_update_time_since_epoch - e.create_time_since_epoch) / 1000
    print(f'{name:28s} {times[name]:8.2f} s')
print(f'TOTAL {total:.2f} s')
if a.mode == 'examples':
    (uri,) = [x.uri for x in store.get_artifacts_by_type('Examples')]
    print(f'EXAMPLES {uri}')
else:
    import tensorflow as tf
    (uri,) = [x.uri for x in store.get_artifacts_by_type('InferenceResult')]
    files = sorted(glob.glob(os.path.join(uri, '*')))
    logs = sum(1 for _ in tf.data.TFRecordDataset(files, compression_type='GZIP'))
    seconds = times['BulkInferrer']
    print(f'PredictionLogs {logs} in {uri}; BulkInferrer {seconds:.2f} s, {logs / seconds:.0f} rows/s')
    print('RESULT ' + json.dumps({'system': 'tfx-1.16', 'beam_args': beam_args, 'stage_s': seconds,
                                  'total_s': total, 'prediction_logs': logs, 'output': uri}))
