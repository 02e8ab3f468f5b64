"""The two ways a module can fail: refused at load, or stopped while running."""


class ModuleError(Exception):
    """A module refused at load time: the message says why."""


class ModuleTrap(Exception):  # noqa: N818 (a trap, as wasm calls it)
    """A module stopped while running: deadline, fuel, memory limit or a trap."""
