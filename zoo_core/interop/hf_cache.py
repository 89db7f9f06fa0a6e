"""A model folder named by its Hub repository id, found in the Hugging Face cache, offline.

`zoo import hf ORG/NAME` reads what `huggingface_hub` (or transformers) already
downloaded: ``$HF_HUB_CACHE/models--ORG--NAME/snapshots/REVISION/``, the
revision that ``refs/main`` names. The cache is read with huggingface_hub's own
functions and ``local_files_only``, as with ``HF_HUB_OFFLINE=1``: nothing is
ever fetched, so an import works the same with the network off.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import ZooError

REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*")


def looks_like_repo_id(text: str) -> bool:
    """ORG/NAME, and no folder of that name here: a path that exists is always read as a path."""
    return bool(REPO_ID.fullmatch(text)) and not Path(text).exists()


def cached_snapshot(repo_id: str) -> Path:
    """The cached snapshot folder of ``repo_id``'s main revision, or one line saying it is not cached."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except LocalEntryNotFoundError:
        raise ZooError(
            f"'{repo_id}' is not in the Hugging Face cache ({constants.HF_HUB_CACHE}), and the zoo never "
            "downloads; give the model folder, or download it with huggingface_hub first"
        ) from None
