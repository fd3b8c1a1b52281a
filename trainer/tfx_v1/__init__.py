"""TFX's ``tfx.v1`` names a module file uses, for modules that import ``from tfx import v1 as tfx``.

TFX's own example module files (penguin, taxi) write ``tfx.components.FnArgs``,
``tfx.components.DataAccessor`` and ``tfx.components.TunerFnResult`` in their code. Porting
such a file changes only its import line:

    from tfx import v1 as tfx                 # before
    from trainer import tfx_v1 as tfx         # after: tfx.components.FnArgs etc. work

Only the trainer contract's names are here; any other ``tfx.*`` name is not provided.
"""

from trainer.tfx_v1 import components

__all__ = ["components"]
