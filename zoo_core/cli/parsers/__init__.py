"""Each command family's parsers (zoo_core/cli/parsers/FAMILY.py), apart from
its handlers (zoo_core/cli/FAMILY.py): `zoo --help` and shell completion build
every parser, so these modules import nothing heavier than the catalogue's
index read. A parser names its handler as ``run="FAMILY:cmd_NAME"``; the
dispatcher imports that family's handlers only when the command runs."""
