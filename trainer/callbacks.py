"""Keras callbacks for module files: :class:`BackupAndRestore`, whose writes are atomic.

``keras.callbacks.BackupAndRestore`` (Keras 3.15) writes its weights file in place. A worker
killed while it writes (a preempted VM, an OOM kill) leaves the file truncated; the next
attempt's restore then fails with h5py's "truncated file" error. ``double_checkpoint=True``
falls back to the previous copy, but during the *first* backup there is none, and the run
cannot resume until someone deletes the backup folder. Here the weights and the training
metadata are written beside their final names and renamed over them (atomic on a local
disk; on an object store a copy), so a kill leaves the previous state or the new one,
never half of one, and an attempt killed during the first backup starts from epoch 0.

Example (a module's ``run_fn``; a drop-in for Keras's callback)::

    from trainer.callbacks import BackupAndRestore

    model.fit(..., callbacks=[BackupAndRestore(os.path.join(fn_args.model_run_dir, "backup"))])
"""

from __future__ import annotations

import json

import keras

from beam_pipeline.core import fileio

__all__ = ["BackupAndRestore"]

# Keras requires a weights file name to end so; the partial one keeps the suffix.
_WEIGHTS_SUFFIX = ".weights.h5"
_PARTIAL = ".partial"


class BackupAndRestore(keras.callbacks.BackupAndRestore):
    """``keras.callbacks.BackupAndRestore`` with atomic writes (same arguments, same files).

    Keras's own ``_save_model`` is replaced (a private method of the pinned Keras 3.15): it
    has no hook for where it writes. The restore is Keras's.
    """

    def _save_model(self):
        if not fileio.exists(self.backup_dir):
            fileio.makedirs(self.backup_dir)
        if self.double_checkpoint and fileio.exists(self._weights_path):
            _replace_with_copy(self._weights_path, self._prev_weights_path)
        if self.double_checkpoint and fileio.exists(self._training_metadata_path):
            _replace_with_copy(self._training_metadata_path, self._prev_training_metadata_path)
        partial = self._weights_path[: -len(_WEIGHTS_SUFFIX)] + _PARTIAL + _WEIGHTS_SUFFIX
        self.model.save_weights(filepath=partial, overwrite=True)
        fileio.rename(partial, self._weights_path, overwrite=True)
        # After the weights: a kill between the two resumes at the epoch before, with the
        # newer weights (one epoch's steps again), as Keras's own order does.
        metadata = {"epoch": self._current_epoch, "batch": self._last_batch_seen}
        fileio.write_atomic(self._training_metadata_path, json.dumps(metadata))


def _replace_with_copy(src: str, dst: str) -> None:
    """``dst`` becomes a copy of ``src``, never a half-written one."""
    partial = dst + _PARTIAL
    fileio.copy(src, partial, overwrite=True)
    fileio.rename(partial, dst, overwrite=True)
