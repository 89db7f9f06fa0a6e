"""Learned, sinusoidal and no position encodings (seed 000), and RoPE (seed 004's next step)."""

from zoo_core import hookimpl


@hookimpl
def register_positions(register):
    register("learned", "plugins.positions.encodings:LearnedPositions")
    register("sinusoidal", "plugins.positions.encodings:SinusoidalPositions")
    register("none", "plugins.positions.encodings:NoPositions")
    register("rope", "plugins.positions.rope:RotaryPositions")
