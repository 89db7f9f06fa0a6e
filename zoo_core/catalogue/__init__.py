"""The catalogue: every variant the zoo can find, described by validated cards.

Words used throughout the zoo:

- a *registry file* is one TOML file of cards (the project's ``registry.toml``,
  a plugin's, the user's, ``--registry FILE``); "registry" means nothing else;
- the *catalogue* is every variant read from all registry files, in layers
  (built-in, plugin, user, extra files): ``layers.build_catalogue``;
- a *card* is one variant's validated description (``cards.ModelCard``).

Nothing in this package imports torch: ``zoo list`` reads TOML and cached cards only.
"""
