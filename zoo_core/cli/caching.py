"""The cache folder: cache clear."""

from __future__ import annotations

from ..storage.cache_folder import clear_cache
from ..storage.locations import cache_dir


def cmd_cache(args) -> int:
    cleared = clear_cache(everything=args.all)
    print(f"cleared {cache_dir()}:")
    for part, files, size in cleared:
        print(f"  {part.folder + '/':<14} {files:>5} files {size / 1e6:>9.2f} MB  {part.holds}")
    return 0
