"""heatc: compile Semantic Drift Sensitivity heatmaps and rule files into state machines
that check generated text token by token."""

from heatc.version import __version__

__all__ = ["__version__"]
