"""How running a module can fail: refused at load, stopped while running, used after
`close()`, or a sequence used after a trap interrupted it.

Public surface: `ModuleError`, `ModuleTrap`, `CheckerClosed`, `SequenceInterrupted`.
"""


class ModuleError(Exception):
    """A module refused at load time: the message says why."""


class ModuleTrap(Exception):  # noqa: N818 (a trap, as wasm calls it)
    """A module stopped while running: deadline, fuel, memory limit or a trap."""


class CheckerClosed(RuntimeError):  # noqa: N818 (a state, as `closed` files say it)
    """A checker, or a batch, used after `close()` (its own, or its checker's)."""


class SequenceInterrupted(RuntimeError):  # noqa: N818
    """A batch sequence a trap left mid-step: reset it, or fork a clean one onto it, first."""
