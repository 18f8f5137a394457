"""A template whose costs are given per op, for testing the engine in isolation."""

from accelerators.base import OpCost, Param, Resources, Template


class Toy(Template):
    name = "toy"
    description = "test template: fixed costs per op name"
    PARAMS = (Param("bandwidth_Bps", float, "B/s", 1e9, "shared channel bandwidth", 1.0, 1e15),)

    def __init__(self, table, **values):
        self.table = table  # op name -> (unit, compute_s, dram bytes)
        super().__init__(**values)

    def cost(self, op):
        unit, compute_s, nbytes = self.table[op.name]
        mem_s = nbytes / self.hw.bandwidth_Bps
        return OpCost(unit=unit, latency_s=max(compute_s, mem_s), compute_s=compute_s,
                      clock_hz=1e9, traffic={"dram": nbytes} if nbytes else {},
                      energy_j={"compute": 1e-9}, bound="memory" if mem_s > compute_s else "compute")

    def resources(self):
        return Resources(units={"a": 1, "b": 1}, channels={"dram": self.hw.bandwidth_Bps})

    def area_mm2(self):
        return 1.0

    def static_power_w(self):
        return 0.5
