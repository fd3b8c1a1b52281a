"""beam_options' speed-ups keep Beam's answers: one view per class, DoFn specs per instance."""

from __future__ import annotations

import copy
import inspect
import pickle

import apache_beam as beam
from apache_beam.coders import VarIntCoder
from apache_beam.options import pipeline_options as po
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.userstate import ReadModifyWriteStateSpec
from conftest import make_pipeline

from beam_pipeline.runtime.options import new_options, parse_beam_args


def test_each_view_is_built_once_and_shares_the_options_of_every_other_view():
    options = parse_beam_args(["--runner=DirectRunner", "--job_name=a"])
    cloud = options.view_as(po.GoogleCloudOptions)
    assert options.view_as(po.GoogleCloudOptions) is cloud
    cloud.job_name = "b"  # a write through one view is what every view reads
    assert options.view_as(po.GoogleCloudOptions).job_name == "b"
    assert options.get_all_options()["job_name"] == "b"
    assert options.view_as(po.StandardOptions).runner == "DirectRunner"


def test_a_copy_or_a_pickle_has_its_own_views_and_its_own_values():
    options = new_options(["--job_name=a"], direct_num_workers=2)
    options.view_as(po.GoogleCloudOptions)
    own = copy.deepcopy(options)  # as beam.Pipeline copies its options
    own.view_as(po.GoogleCloudOptions).job_name = "trial-1"
    assert options.view_as(po.GoogleCloudOptions).job_name == "a"
    assert own.view_as(po.GoogleCloudOptions) is not options.view_as(po.GoogleCloudOptions)
    back = pickle.loads(pickle.dumps(options))
    assert back.view_as(po.GoogleCloudOptions).job_name == "a"
    assert back.view_as(po.DirectOptions).direct_num_workers == 2


class _Count(beam.DoFn):
    """A stateful DoFn: Beam must still see its state spec through the cache."""

    TOTAL = ReadModifyWriteStateSpec("total", VarIntCoder())

    def process(self, kv, total=beam.DoFn.StateParam(TOTAL)):  # noqa: B008  Beam's state API
        n = (total.read() or 0) + kv[1]
        total.write(n)
        yield kv[0], n


class _Plain(beam.DoFn):
    def process(self, x):
        yield x


def test_dofn_specs_are_beams_own_answer_and_a_stateful_dofn_still_runs():
    p = make_pipeline("--runner=DirectRunner")  # installs the cache
    assert getattr(userstate.get_dofn_specs, "beam_pipeline_cached", False)
    stateful, plain = _Count(), _Plain()
    states, timers = userstate.get_dofn_specs(stateful)
    assert [s.name for s in states] == ["total"] and not timers
    assert userstate.get_dofn_specs(stateful) == (states, timers)  # asked again: the same
    assert userstate.is_stateful_dofn(stateful) and not userstate.is_stateful_dofn(plain)
    # Element order within a key is not fixed: only each key's last (largest) sum is.
    out = (
        p
        | beam.Create([("a", 1), ("a", 2), ("b", 5)])
        | beam.ParDo(_Count())
        | beam.CombinePerKey(max)
    )
    assert_that(out, equal_to([("a", 3), ("b", 5)]))
    p.run().wait_until_finish()


def test_method_signatures_are_beams_own_answer_asked_once_per_function():
    from apache_beam.transforms import core
    from apache_beam.typehints import decorators

    make_pipeline("--runner=DirectRunner")  # installs the cache
    assert getattr(decorators.get_signature, "beam_pipeline_cached", False)
    assert core.get_signature is decorators.get_signature
    one, two = _Count(), _Count()
    signature = decorators.get_signature(one.process)
    assert str(signature) == str(inspect.signature(_Count().process))  # self left out
    # Another instance's method: the function's signature, asked of Beam once.
    assert decorators.get_signature(two.process) is signature
    # What Beam reads from it: the argument names and the state parameter's default.
    args, defaults = core.get_function_args_defaults(two.process)
    assert args == ["kv", "total"] and defaults[0].state_spec is _Count.TOTAL
    # A plain function is Beam's own answer, not a method's.
    assert list(decorators.get_signature(lambda a, b=1: a).parameters) == ["a", "b"]


def test_the_state_cache_weighs_values_as_beam_does_without_scanning_module_globals():
    import numpy as np
    from apache_beam.runners.worker import statecache

    make_pipeline("--runner=DirectRunner")  # installs it
    ours, beams = statecache.get_deep_size, statecache.get_deep_size.__wrapped__
    assert ours is not beams
    # What the stages cache: analyzer results, vocabularies, arrays: the same weight.
    for value in ([np.arange(100.0), np.arange(10)], {"a": [b"x"] * 50}, [("k", 1.5)] * 20):
        assert ours(value) == beams(value) > 0
    # A value holding a module's namespace: counted (the scan that skipped every loaded
    # module's namespace is gone), so a weight is never below Beam's.
    held = [{"namespace": globals()}]
    assert ours(held) > beams(held) + 1000
    # The in-process runner's cache weighs with it (a small value: a namespace's weight
    # depends on what the process imported, and may pass a small budget).
    cache = statecache.StateCache(1 << 30)
    assert cache.get("key", lambda key: [1.5, "x"]) == [1.5, "x"]
    assert cache.describe_stats()  # Beam's own accounting still works
    assert cache.size() == 1


def test_every_job_stages_the_launchers_package_list_made_by_one_pip_freeze(tmp_path, monkeypatch):
    import sys

    from apache_beam.runners.portability.stager import SUBMISSION_ENV_DEPENDENCIES_FILE, Stager

    new_options()  # installs the list made once
    first, later = tmp_path / "first", tmp_path / "later"
    first.mkdir()
    later.mkdir()
    made = Stager._create_stage_submission_env_dependencies(str(first))
    # Whatever job ran first in this process made the list (pip freeze); from here on no
    # `pip` can run: a second pip freeze would fail, and Beam would stage no list at all.
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python"))
    again = Stager._create_stage_submission_env_dependencies(str(later))
    assert len(made) == len(again) == 1
    assert again[0].role_payload == made[0].role_payload  # the same staged name
    text = (first / SUBMISSION_ENV_DEPENDENCIES_FILE).read_text()
    assert "apache-beam==" in text
    assert (later / SUBMISSION_ENV_DEPENDENCIES_FILE).read_text() == text
