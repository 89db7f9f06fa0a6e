"""The cache folder: cache clear."""

from __future__ import annotations

from ..storage.cache_folder import clear_cache
from ..storage.locations import cache_dir, zoo_home
from ..storage.staging import folder_size, leftover_staging, remove_leftover_staging


def cmd_cache(args) -> int:
    cleared = clear_cache(everything=args.all)
    print(f"cleared {cache_dir()}:")
    for part, files, size in cleared:
        print(f"  {part.folder + '/':<14} {files:>5} files {size / 1e6:>9.2f} MB  {part.holds}")
    home = zoo_home()
    sizes = {folder: folder_size(folder) for folder in leftover_staging(home)}
    for folder in remove_leftover_staging(home):
        print(f"removed {folder} ({sizes[folder] / 1e6:.2f} MB), left by an install or pull that was killed")
    return 0
