"""The module file of benchmarks/bench_bulk_inferrer.py: a pass-through preprocessing_fn.

The CLI runs the BulkInferrer after Transform (Transform without a module file stops the
run), so the benchmark gives it the cheapest one: one feature passed through, no run_fn
(the run is made with --no_trainer; the model comes from --infer_model).
"""


def preprocessing_fn(inputs):
    return {"trip_start_hour": inputs["trip_start_hour"]}
