"""``tfx.v1.components``' trainer-contract names: FnArgs, DataAccessor, TunerFnResult.

Example::

    from trainer import tfx_v1 as tfx

    def run_fn(fn_args: tfx.components.FnArgs): ...
"""

from trainer.data_accessor import DataAccessor
from trainer.fn_args import FnArgs, TunerFnResult

__all__ = ["DataAccessor", "FnArgs", "TunerFnResult"]
