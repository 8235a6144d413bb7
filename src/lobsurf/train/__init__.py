"""Training runs: config, data and split, the loop, checkpoints and the run folder.

The package is also callable: ``lobsurf.train(...)`` is ``lobsurf.api.train(...)``. A
function of that name in ``lobsurf`` would be replaced by this package as soon as anything
imported it, so the package itself takes the call.
"""

import sys as _sys
import types as _types


class _CallablePackage(_types.ModuleType):
    def __call__(self, *args, **kwargs):
        from lobsurf.api import train

        return train(*args, **kwargs)

    @property
    def __signature__(self):
        # shown by help tools (inspect.signature, a notebook's call tip)
        import inspect

        from lobsurf.api import train

        return inspect.signature(train)


_sys.modules[__name__].__class__ = _CallablePackage
