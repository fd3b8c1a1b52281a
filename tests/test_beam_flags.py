"""What a run reads of its Beam flags without Beam is what Beam itself reads (issue 45).

A rerun that reuses every stage imports no Beam (tests/test_cached_rerun.py), so two
answers that Beam gave before are now given here: the Beam flags the run's checks read
(:mod:`beam_pipeline.runtime.beam_flags`) and the local files a ``--data`` glob matches
(:mod:`transforms.example_gen.input_files`). Each is compared with Beam's own answer, flag
by flag and pattern by pattern, and whatever the light path does not read must fall back
to Beam, so that a flag is refused exactly as strictly as before.
"""

from __future__ import annotations

import os

import pytest
from apache_beam.io.filesystems import FileSystems
from apache_beam.options import pipeline_options as po

from beam_pipeline.core.errors import PipelineError
from beam_pipeline.runtime import beam_flags
from beam_pipeline.runtime.options import parse_beam_args
from transforms.example_gen import input_files

# Flag lists the light path reads: each option's value must be Beam's.
READ = [
    [],
    ["--runner=DirectRunner"],
    ["--runner=direct"],
    ["--runner="],
    ["--runner=DirectRunner", "--direct_running_mode=multi_processing"],
    ["--direct_running_mode=in_memory", "--direct_num_workers=2"],
    ["--direct_num_workers=0", "--direct_num_workers=3"],  # the last one wins, as in Beam
    ["--direct_num_workers= 4"],
]

# Flag lists it must leave to Beam (refused there, or with an answer it does not know).
LEFT_TO_BEAM = {
    "multi_threading": (["--direct_running_mode=multi_threading"], "drops elements"),
    "bad mode": (["--direct_running_mode=threads"], "not a value"),
    "not a number": (["--direct_num_workers=abc"], "not a value"),
    "misspelled runner": (["--runner=DirectRuner"], "not a runner Beam knows"),
    "abbreviated flag": (["--direct_num=2"], "Unknown flag"),
    "unknown flag": (["--no_such_flag=1"], "Unknown flag"),
    "another runner": (["--runner=PortableRunner"], None),
    "value apart": (["--runner", "DirectRunner"], None),
    "bare flag": (["--save_main_session"], None),
    "a flag only Beam reads": (["--environment_type=LOOPBACK"], None),
}


def _deferred(args):
    given = beam_flags.light_values(args)
    assert given is not None, args
    return beam_flags.DeferredOptions(args, given, parse_beam_args)


@pytest.mark.parametrize("args", READ, ids=" ".join)
def test_the_flags_read_without_beam_give_beams_values(args):
    deferred, beams = _deferred(args), parse_beam_args(args)
    for name, (view, _, _) in beam_flags._LIGHT.items():  # noqa: SLF001  the table under test
        expected = getattr(beams.view_as(getattr(po, view)), name)
        assert beam_flags.option(deferred, view, name) == expected, name
    assert not deferred.built  # answered without Beam's options
    assert beam_flags.is_direct(deferred) == beam_flags.is_direct(beams)
    assert beam_flags.is_multi_processing(deferred) == beam_flags.is_multi_processing(beams)
    # Asked for more, the options are Beam's own, built from the same flags.
    assert deferred.view_as(po.DirectOptions).direct_num_workers == (
        beams.view_as(po.DirectOptions).direct_num_workers
    )
    assert deferred.built
    assert beam_flags.resolved(deferred).get_all_options() == beams.get_all_options()


@pytest.mark.parametrize("args,refusal", LEFT_TO_BEAM.values(), ids=LEFT_TO_BEAM)
def test_flags_not_read_without_beam_are_left_to_beams_parser(args, refusal):
    assert beam_flags.light_values(args) is None
    if refusal is None:
        parse_beam_args(args)  # Beam takes them; the run then holds Beam's options
        return
    with pytest.raises(PipelineError, match=refusal):
        parse_beam_args(args)


# A tree of files for the glob table below; the patterns are relative to its root.
TREE = [
    "a.csv",
    "b.csv",
    "c.tsv",
    ".hidden.csv",
    "_SUCCESS",
    "d[1].csv",
    "sub/e.csv",
    "sub/deeper/f.csv",
    "sub/g.txt",
    "span-1/data.csv",
    "span-12/data.csv",
    "odd name/h.csv",
]
PATTERNS = [
    "a.csv",
    "*.csv",
    "*",
    "**",
    "**.csv",
    "sub/*",
    "sub/**",
    "sub/**/*.csv",
    "?.csv",
    "[ab].csv",
    "[!a].csv",
    "d[1].csv",
    "d[[]1].csv",
    "span-*/data.csv",
    "span-?/data.csv",
    "span-[0-9]*/*.csv",
    "odd name/*",
    "no/such/*.csv",
    "nothing*",
    "sub/",
    "[",
    "a.c[sv",
]


def _tree(root) -> None:
    for i, name in enumerate(TREE):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x" * i)


def _beams(glob: str) -> list[tuple[str, int]]:
    return sorted((m.path, m.size_in_bytes) for m in FileSystems.match([glob])[0].metadata_list)


@pytest.mark.parametrize("pattern", PATTERNS)
def test_a_local_data_glob_matches_what_beams_filesystems_match(tmp_path, pattern):
    _tree(tmp_path)
    glob = os.path.join(str(tmp_path), pattern)
    assert sorted(input_files._match(glob)) == _beams(glob)  # noqa: SLF001  under test


@pytest.mark.parametrize("pattern", ["*.csv", "sub/*.csv", "./sub/**", "a.csv", "sub/"])
def test_a_relative_data_glob_matches_what_beams_filesystems_match(tmp_path, monkeypatch, pattern):
    _tree(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert sorted(input_files._match(pattern)) == _beams(pattern)  # noqa: SLF001  under test
