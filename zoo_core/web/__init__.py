"""The zoo in a browser: a static gallery (`zoo gallery`) and a local server (`zoo serve`).

Needs the `web` extra (`pip install 'zoo-lm[web]'`); nothing outside this package
imports it, so `zoo list` and the core never pay for it.
"""
