"""The families the transformer plugin knows, one record each (docs/plugins.md, "Adding a family").

Registered by `zoo_plugins.models` through `register_families`, as strings, so
nothing here is imported until a converter asks for a record."""
