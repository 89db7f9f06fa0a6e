"""Learned, sinusoidal and no position encodings (seed 000), and RoPE (seed 004's next step)."""

from zoo_core import hookimpl


@hookimpl
def register_positions(register):
    register("learned", "zoo_plugins.positions.encodings:LearnedPositions")
    register("sinusoidal", "zoo_plugins.positions.encodings:SinusoidalPositions")
    register("none", "zoo_plugins.positions.encodings:NoPositions")
    register("rope", "zoo_plugins.positions.rope:RotaryPositions")
