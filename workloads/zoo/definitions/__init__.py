"""The zoo's model definitions; importing this package registers every model."""

from workloads.zoo.definitions import (convnets, encoders, llm, micro,  # noqa: F401
                                       neural_fields, sparse, vision)
