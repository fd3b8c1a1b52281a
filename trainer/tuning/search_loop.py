"""The search job's worker side: a long-lived loop that claims a trial, runs it, reports it.

One loop per parallel slot, each on its own worker, all in ONE Beam job per search
(:class:`transforms.tuner.RunSearch`). The oracle is nowhere in particular: its state
(the oracle's own attributes, trials included, and the driver's bookkeeping, see
:meth:`trainer.tuning.OracleDriver.state`) is one document in the run's shared storage
(:mod:`trainer.tuning.shared_state`), and every ask and every report is one atomic
compare-and-swap on it: the worker loads the state into its own tuner's oracle (from the
module's ``tuner_fn``, loaded once per process), asks or reports as the launcher's
:class:`~trainer.tuning.OracleDriver` would, and writes the new state back only if no
other worker wrote meanwhile. No worker reaches the launcher, and no oracle server runs:
the role of keras-tuner's ``oracle_chief`` / ``oracle_client`` pair, without the gRPC.

Leases: a claimed trial carries ``{owner, worker, deadline}``; the loop renews the
deadline every third of ``lease_seconds`` while the trial runs. A trial whose lease ran
out (its worker was lost or hangs) is re-issued to the next loop that claims, with the
same attempt number; a loop that finds a trial still held by its own slot (the runner
reran the slot after losing its worker) takes it back at once. A report from a loop that
no longer holds the lease is dropped, and the trial's result file
(:mod:`trainer.tuning.result_files`) lets the new holder reuse a finished attempt, so a trial
never counts twice.

A trial that raises is its result (the others go on); an error that stops the search
(keras-tuner's ``FatalError``, ``max_consecutive_failed_trials``, a ``tuner_fn`` that
fails on the worker) is written into the state as ``stopped``: every loop ends after its
current trial and the launcher raises it.

Example::

    state = start_search_state(driver, state_path(driver.project_dir))  # the launcher
    loop = SearchLoop(job, state.path, TrialRunner(job))                # on each worker
    for result in loop.run(slot):
        ...                                                             # count it
"""

from __future__ import annotations

import contextlib
import enum
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

from beam_pipeline.core import fileio
from beam_pipeline.core.errors import PipelineError
from trainer.process import worker_name
from trainer.tuning.messages import TrialResult, TrialSpec, TuningJob
from trainer.tuning.oracle import OracleDriver
from trainer.tuning.shared_state import SharedState, open_shared_state
from trainer.tuning.trial_runner import TrialRunner

__all__ = [
    "DEFAULT_LEASE_SECONDS",
    "STATE_FILE",
    "Claim",
    "SearchLoop",
    "finished_driver",
    "read_state",
    "start_search_state",
    "state_path",
]

_LOG = logging.getLogger(__name__)

STATE_FILE = "beam_search_state.json"
# A worker lost for this long loses its trial to the next loop that claims; renewed every
# third of it, so a busy store or a slow write does not lose a live worker's trial.
DEFAULT_LEASE_SECONDS = 120.0
_POLL_SECONDS = 0.25  # a loop that has nothing to run (the oracle waits) asks again after it


def state_path(project_dir: str) -> str:
    """Where a search's shared state lives: beside the tuner project's oracle.json."""
    return fileio.join(project_dir, STATE_FILE)


def start_search_state(
    driver: OracleDriver, path: str, lease_seconds: float = DEFAULT_LEASE_SECONDS
) -> SharedState:
    """Writes a search's first state; returns its store.

    The launcher's driver, freshly made, asks the first trial of every slot (round 0, as
    the rolling schedule does), each held for its slot's loop: every worker starts with a
    trial of its own however late it comes up (one that never does loses its trial when
    the lease runs out).
    """
    now = time.time()
    first = driver.ask()
    store = open_shared_state(path)
    store.create(
        {
            "slots": driver.slots,
            "driver": driver.state(),
            "leases": {
                spec.trial_id: {"owner": None, "worker": "", "deadline": now + lease_seconds}
                for spec in first
            },
            "times": {spec.trial_id: {"claimed": now} for spec in first},
            "stopped": None,
            "done": False,
            "loops": {},
            "reissued": 0,
            "dropped_reports": 0,
        }
    )
    return store


def finished_driver(driver: OracleDriver, doc: dict[str, Any]) -> OracleDriver:
    """``driver`` (the launcher's) loaded with a finished search's state.

    Raises:
      PipelineError: the search stopped on an error (the workers' own message).
    """
    driver.load_state(doc["driver"])
    if doc["stopped"]:
        raise PipelineError(doc["stopped"])
    return driver


class Claim(enum.Enum):
    """A claim's answer when it hands out no trial."""

    WAIT = "wait"  # the oracle waits for running trials (Hyperband's next rung): ask again
    OVER = "over"  # the search is over (or stopped): the loop ends


class SearchLoop:
    """One slot's loop of a search job (see the module docstring).

    Args:
      job: the tuning job (named in errors).
      path: the search's shared state (:func:`state_path`).
      runner: this process's trial runner (its tuner's oracle is the scratch oracle each
        ask and report loads the state into; loops that share a runner take turns).
      lease_seconds: how long a claimed trial stays this loop's without a renewal.
    """

    def __init__(
        self,
        job: TuningJob,
        path: str,
        runner: TrialRunner,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        self._job = job
        self._store = open_shared_state(path)
        self._runner = runner
        self._lease_seconds = lease_seconds
        # One oracle per runner (its tuner's); loops sharing a runner take turns with it.
        self._oracle_lock = runner.oracle_lock

    def run(self, slot: int) -> Iterator[TrialResult]:
        """Claims, runs and reports trials for ``slot`` until the search is over.

        Yields each trial attempt's result (reused ones included) once it is reported or
        dropped (another loop holds the trial now).
        """
        owner = f"{worker_name()}/{uuid.uuid4().hex[:8]}"
        try:
            self._runner.tuner()
        except PipelineError as e:  # tuner_fn fails here: the search cannot go on anywhere
            error = str(e)
            self._store.update(lambda doc: ({**doc, "stopped": doc["stopped"] or error}, None))
            return
        while True:
            claim = self.claim(slot, owner)
            if claim is Claim.OVER:
                return
            if claim is Claim.WAIT:
                time.sleep(_POLL_SECONDS)
                continue
            assert isinstance(claim, TrialSpec)
            with self._renewing(claim.trial_id, owner):
                result = self._runner.run(claim)
            self.report(claim, result, owner)
            yield result

    def claim(self, slot: int, owner: str) -> TrialSpec | Claim:
        """One atomic claim for ``slot`` by loop ``owner``: a trial to run, WAIT or OVER.

        A trial this slot held before (its earlier loop was lost) or one whose lease ran
        out comes first, with its attempt unchanged; else the oracle is asked for one.
        """
        tuner = self._runner.tuner().tuner
        with self._oracle_lock:
            return self._store.update(lambda doc: self._claim(doc, tuner, slot, owner))

    def report(self, spec: TrialSpec, result: TrialResult, owner: str) -> bool:
        """Reports ``result`` of ``spec`` to the oracle atomically, if ``owner`` holds it.

        Returns:
          False when the trial was re-issued (its new holder reports it), else True.
        """
        tuner = self._runner.tuner().tuner
        with self._oracle_lock:
            return self._store.update(lambda doc: self._report(doc, tuner, spec, result, owner))

    def _driver(self, tuner, doc: dict[str, Any]) -> OracleDriver:
        driver = OracleDriver(tuner, doc["slots"], None, self._job.module_file)
        driver.load_state(doc["driver"])
        return driver

    def _lease(self, owner: str, now: float) -> dict[str, Any]:
        return {"owner": owner, "worker": worker_name(), "deadline": now + self._lease_seconds}

    def _claim(self, doc: dict[str, Any], tuner, slot: int, owner: str):
        """The claim's change (see :meth:`claim`)."""
        if doc["stopped"] or doc["done"]:
            return None, Claim.OVER
        driver = self._driver(tuner, doc)
        now = time.time()
        leases = doc["leases"]
        # Which worker runs this slot's loop: the launcher of a local pool replaces a lost
        # process's slots by this.
        moved = doc["loops"].get(str(slot)) != worker_name()
        doc["loops"][str(slot)] = worker_name()
        # This slot's own trial first: its first one (asked by the launcher), or one its
        # earlier loop held (the runner reran the slot after losing its worker). Then a
        # trial whose holder stopped renewing it: re-issued, same attempt.
        own = [t for t in sorted(leases) if driver.pending_slot(t) == slot]
        expired = [t for t in sorted(leases) if leases[t]["deadline"] < now]

        def take(trial_id: str):
            """This loop holds ``trial_id`` (asked earlier, not new) from now on."""
            if leases[trial_id]["owner"] is None:  # its first claim: from now on, its time
                doc["times"][trial_id]["claimed"] = now
            spec = driver.move_trial(trial_id, slot)
            leases[trial_id] = self._lease(owner, now)
            doc["driver"] = driver.state()
            return doc, spec

        for trial_id in own[:1] or expired[:1]:
            lease = leases[trial_id]
            if lease["owner"] is not None:
                _LOG.warning(
                    "Tuner trial %s: re-issued to slot %d (held by %s, lease %s).",
                    trial_id,
                    slot,
                    lease["worker"],
                    "expired" if lease["deadline"] < now else "of this slot's lost worker",
                )
                doc["reissued"] += 1
            return take(trial_id)
        specs = driver.ask(1, slot=slot)
        if specs:
            spec = specs[0]
            leases[spec.trial_id] = self._lease(owner, now)
            doc["times"][spec.trial_id] = {"claimed": now}
            doc["driver"] = driver.state()
            return doc, spec
        # Nothing new to ask: another slot's first trial that no loop claimed yet (its
        # worker is late, or the runner runs the slots one after another) runs here.
        unclaimed = [t for t in sorted(leases) if leases[t]["owner"] is None]
        if unclaimed:
            return take(unclaimed[0])
        if not driver.running:  # nothing to run and nothing running: the search is over
            doc["done"] = True
            return doc, Claim.OVER
        # The oracle waits for running trials (Hyperband's next rung).
        return (doc if moved else None), Claim.WAIT

    def _report(
        self,
        doc: dict[str, Any],
        tuner,
        spec: TrialSpec,
        result: TrialResult,
        owner: str,
    ):
        """The report's change: the result to the oracle, unless the trial was re-issued."""
        lease = doc["leases"].get(spec.trial_id)
        if lease is None or lease["owner"] != owner:
            doc["dropped_reports"] += 1  # its new holder reports it (reusing this result)
            return doc, False
        driver = self._driver(tuner, doc)
        del doc["leases"][spec.trial_id]
        doc["times"].setdefault(spec.trial_id, {})["reported"] = time.time()
        try:
            driver.report({spec.trial_id: result}, [spec])
        except PipelineError as e:  # fatal, or too many failures in a row: all loops stop
            doc["stopped"] = doc["stopped"] or str(e)
        doc["driver"] = driver.state()
        return doc, True

    def _renew(self, doc: dict[str, Any], trial_id: str, owner: str):
        lease = doc["leases"].get(trial_id)
        if lease is None or lease["owner"] != owner:
            return None, False
        lease["deadline"] = time.time() + self._lease_seconds
        return doc, True

    @contextlib.contextmanager
    def _renewing(self, trial_id: str, owner: str):
        """While the trial runs, a thread renews its lease every third of the lease time."""
        stop = threading.Event()

        def renew() -> None:
            while not stop.wait(self._lease_seconds / 3):
                try:
                    self._store.update(lambda doc: self._renew(doc, trial_id, owner))
                except Exception as e:  # noqa: BLE001  a store hiccup: the next renewal may do
                    _LOG.warning("Could not renew the lease of trial %s: %s", trial_id, e)

        thread = threading.Thread(target=renew, name=f"tuner-lease-{trial_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()


def read_state(path: str) -> dict[str, Any]:
    """The search's shared state as it is now."""
    return open_shared_state(path).read()
