"""heatc: compile Semantic Drift Sensitivity heatmaps and rule files into state machines
that check generated text token by token."""

__version__ = "0.1.0"
