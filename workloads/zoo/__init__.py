"""The built-in model zoo: plain-torch definitions with architecture parameters as arguments."""

from workloads.zoo.registry import FAMILIES, ModelSpec, get_model, model_names, register

__all__ = ["FAMILIES", "ModelSpec", "get_model", "model_names", "register"]
