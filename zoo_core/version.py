"""The zoo's version, in the ground floor: the card cache's key and the download
client's User-Agent read it without importing the package's facade (zoo_core),
which sits above every layer."""

__version__ = "0.1.0"
