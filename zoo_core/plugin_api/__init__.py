"""What plugin authors import: the hook specifications, the protocols their
components satisfy, base classes, the testing kit and the package skeleton, and
the plugin manager that finds plugins through the ``zoo`` entry-point group."""
