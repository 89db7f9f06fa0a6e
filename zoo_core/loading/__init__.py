"""Building and loading a variant: the catalogue read in its layers, the network
its card describes built from the plugins' components, its checkpoint (and an
adapter's) verified and loaded into a ZooModel, and `zoo verify`'s checks of all that."""
