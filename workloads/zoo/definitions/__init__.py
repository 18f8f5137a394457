"""The zoo's model definitions; importing this package registers every model."""

from workloads.zoo.definitions import (convnets, diffusion_parts, encoders,  # noqa: F401
                                       llm, micro, mixture_of_experts, neural_fields, sparse,
                                       vision)
