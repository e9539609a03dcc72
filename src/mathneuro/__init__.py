"""mathneuro: find the weights of a language model that serve one skill, using forward passes only."""

__version__ = "0.1.0"
