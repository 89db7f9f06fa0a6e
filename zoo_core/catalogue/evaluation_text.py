"""The text a variant trained elsewhere (an imported card, no recipe) is scored on,
unless its source names a registered dataset: the zoo's standard English text,
with the usual last tenth as validation. Plain constants, so that the catalogue's
torch- and pydantic-free front (`zoo list`) and the cards agree on them."""

EVALUATION_DATASET = "tinyshakespeare"
EVALUATION_TRAIN_FRACTION = 0.9
