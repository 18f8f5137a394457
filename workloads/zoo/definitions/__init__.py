"""The zoo's model definitions; importing this package registers every model."""

from workloads.zoo.definitions import (convnets, encoders, llm, micro,  # noqa: F401
                                       mixture_of_experts, neural_fields, sparse,
                                       vision)
